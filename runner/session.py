"""One observed run: cgroup, monitor, spawn, drain, spool, normalize, archive.

Order matters: the monitor is attached and the spool header written before
the command may start, and after the command exits the ring buffer is
drained once more, so no event in flight is lost. Side effects (cgroup,
monitor) are undone in `finally` whatever happens.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from ebpf.monitor import DEFAULT_RINGBUF_PAGES, Monitor, MonitorConfig, MonitorError
from normalizer.build import NormalizedRun, normalize
from normalizer.spool import SPOOL_FORMAT, SpoolHeader, SpoolTrailer, read_spool
from runner.cgroup import RunCgroup
from runner.errors import RunnerError
from runner.logs import get_logger
from runner.publish import publish
from runner.spawn import CommandSpec, Credentials, Spawned, spawn
from runner.spooler import Spooler
from runner.status import LiveStatus

POLL_MS = 20
log = get_logger("session")


@dataclass(frozen=True)
class RunRequest:
    """A validated `run` invocation."""

    run_id: str
    exe: str
    argv: list[str]
    workdir: Path
    out_dir: Path
    ringbuf_pages: int = DEFAULT_RINGBUF_PAGES
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    user: Credentials | None = None
    isolate_net: bool = False

    @property
    def archive_path(self) -> Path:
        return self.out_dir / f"{self.run_id}.tar.gz"

    @property
    def spool_path(self) -> Path:
        return self.out_dir / f"{self.run_id}.spool"


@dataclass(frozen=True)
class RunResult:
    """What the summary and the caller need."""

    exit_code: int
    archive: Path
    spool: Path
    normalized: NormalizedRun
    elapsed: float


class _Signals:
    """Turns SIGTERM/SIGHUP into flags the drain loop acts on.

    SIGINT from the terminal already reaches the command (same process
    group); the runner ignores it and keeps draining until the command exits.
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self._old = {s: signal.signal(s, self._on) for s in (signal.SIGTERM, signal.SIGHUP)}
        self._old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _on(self, signum: int, _frame: object) -> None:
        self.pending.append(signum)

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


def execute(req: RunRequest) -> RunResult:
    """Run the command under observation and write its archive."""
    started = time.monotonic()
    cgroup = RunCgroup.create(req.run_id)
    monitor: Monitor | None = None
    spooler: Spooler | None = None
    try:
        t0 = time.monotonic()
        try:
            config = MonitorConfig(cgroup.id, cgroup.level, req.ringbuf_pages)
            spooler_sink: list[bytes] = []
            monitor = Monitor(config, spooler_sink.append)
        except MonitorError as exc:
            raise RunnerError(f"{exc}; run 'assay-runner doctor' to see what is missing") from exc
        log.info("monitor.attached", seconds=round(time.monotonic() - t0, 3),
                 ringbuf_pages=req.ringbuf_pages, cgroup=str(cgroup.path))
        spec = CommandSpec(req.exe, req.argv, str(req.workdir), req.env,
                           user=req.user, isolate_net=req.isolate_net)
        spawned = spawn(spec, cgroup)
        header = SpoolHeader(
            format=SPOOL_FORMAT,
            run_id=req.run_id,
            argv=req.argv,
            workdir=str(req.workdir),
            control_pids=[spawned.helper_pid],
            shim_pid=spawned.shim_pid,
            ringbuf_pages=req.ringbuf_pages,
        )
        spooler = Spooler(req.spool_path, header)
        # Records arrive through the sink list until the spooler exists.
        for rec in spooler_sink:
            spooler.add(rec)
        monitor.set_sink(spooler.add)
        spooler.phase("run_started")
        spawned.start()
        exit_code = _drain_until_exit(monitor, spooler, spawned, cgroup)
        spooler.phase("command_exited")
        monitor.drain()
        spooler.phase("run_finished")
        spool_path = spooler.finish(
            SpoolTrailer(exit_code=exit_code, drops=monitor.drops(), emitted=monitor.emitted())
        )
        spooler = None
    finally:
        if spooler is not None:
            spooler.discard()
        if monitor is not None:
            monitor.close()
        cgroup.remove()
    normalized = normalize(read_spool(spool_path), req.run_id)
    publish(normalized, req.archive_path)
    return RunResult(exit_code, req.archive_path, spool_path, normalized,
                     time.monotonic() - started)


def _drain_until_exit(monitor: Monitor, spooler: Spooler, spawned: Spawned,
                      cgroup: RunCgroup) -> int:
    """Drain the ring buffer on a short timer until the command exits."""
    signals = _Signals()
    status = LiveStatus()
    terms = 0
    try:
        while True:
            monitor.wait(POLL_MS)
            monitor.drain()
            spooler.flush()
            code = spawned.poll()
            if code is not None:
                return code
            while signals.pending:
                signum = signals.pending.pop()
                terms += 1
                log.warning("run.signal", signal=signal.Signals(signum).name, count=terms)
                if terms > 1:
                    cgroup.kill()
                else:
                    spawned.signal(signum)
            status.update(spooler.records, monitor.drops)
    finally:
        status.clear()
        signals.restore()
