"""The ways one workload command is run: bare, under our runner, under peers.

Each variant turns a workload command into a `Measurement`: the command's own
time (from its report line), the wall time of the whole invocation, peak RSS,
and, where the monitor gives them, its drop counter and the check that every
event the workload made is in the capture.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.capture import Capture, read_bpftrace_output, read_runner_archive
from bench.procs import Cgroup, Finished, run_measured
from bench.report import EventCheck, ReportError, check_events, parse_report

BPFTRACE_DIR = Path(__file__).resolve().parent / "bpftrace"
STRACE_SYSCALLS = "openat,open,creat,openat2,connect,execve,sendto,sendmsg,chdir,fchdir"
ATTACHED_ENV = "__BPFTRACE_NOTIFY_PROBES_ATTACHED"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Measurement:
    """One run of one workload under one variant."""

    variant: str
    own_s: float | None
    wall_s: float
    max_rss_kib: int | None = None
    rss_while_command_kib: int | None = None
    start_ns: int = 0
    drops: int | None = None
    events: tuple[EventCheck, ...] = ()
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def events_ok(self) -> bool | None:
        """True when every expected event was captured once; None if not checked."""
        return all(c.ok for c in self.events) if self.events else None


def measurement(variant: str, done: Finished, capture: Capture | None = None) -> Measurement:
    """Builds a measurement from a finished process and, optionally, its capture."""
    measured = functools.partial(
        Measurement, variant=variant, wall_s=done.wall_s, max_rss_kib=done.max_rss_kib,
        rss_while_command_kib=done.rss_while_command_kib, start_ns=done.start_ns)
    if failure := done.failure():
        return measured(own_s=None, error=failure)
    try:
        report = parse_report(done.stdout)
    except (ReportError, ValueError, KeyError) as exc:
        return measured(own_s=None, error=str(exc))
    if capture is None:
        return measured(own_s=report.elapsed_s, extra=report.extra)
    return measured(
        own_s=report.elapsed_s, drops=capture.drops, extra=report.extra,
        events=tuple(check_events(report.expect, capture.records)),
    )


class Variant(ABC):
    """A way of running a workload command."""

    name: str

    def unavailable(self) -> str | None:
        """Why this variant cannot run here, or None when it can."""
        return None

    @abstractmethod
    def measure(self, argv: Sequence[str], tag: str, rss: bool = False) -> Measurement:
        """Runs `argv` once; `tag` names the run (archive ids, temp files);
        `rss` also measures peak RSS: overall and while the command runs."""


class Bare(Variant):
    """The command alone: the denominator of every ratio."""

    name = "bare"

    def measure(self, argv: Sequence[str], tag: str, rss: bool = False) -> Measurement:
        return measurement(self.name, run_measured(argv, rss_of=_rss_of(argv, rss)))


class Strace(Variant):
    """`strace -f` on the same syscalls, writing to /dev/null (ptrace's cost)."""

    name = "strace"

    def unavailable(self) -> str | None:
        return None if shutil.which("strace") else "strace is not installed"

    def measure(self, argv: Sequence[str], tag: str, rss: bool = False) -> Measurement:
        cmd = ["strace", "-f", "-qq", "-e", f"trace={STRACE_SYSCALLS}", "-o", "/dev/null"]
        return measurement(self.name, run_measured([*cmd, "--", *argv], rss_of=_rss_of(argv, rss)))


class Runner(Variant):
    """`assay-runner run`, reading drops and events back from its archive."""

    name = "runner"

    def __init__(self, binary: str, out_dir: Path, extra_args: Sequence[str] = ("--direct",),
                 name: str | None = None, env: dict[str, str] | None = None) -> None:
        """`extra_args` defaults to `--direct`: with a daemon at the default socket, `run` alone
        would go through it, and the direct-mode columns would measure the daemon."""
        self.binary = binary
        self.out_dir = out_dir
        self.extra_args = tuple(extra_args)
        self.name = name or self.name
        self.env = None if env is None else {**os.environ, **env}

    def unavailable(self) -> str | None:
        try:
            done = subprocess.run([self.binary, "run", "--help"], capture_output=True,
                                  text=True, timeout=60, check=False)
        except OSError as exc:
            return f"{self.binary}: {exc.strerror}"
        if done.returncode:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return f"`{Path(self.binary).name} run` is not usable yet: {tail[:160]}"
        return None

    def measure(self, argv: Sequence[str], tag: str, rss: bool = False) -> Measurement:
        out = self.out_dir / tag
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        run_id = f"bench-{tag}"
        try:
            done = run_measured([self.binary, "run", "--out", str(out), "--run-id", run_id,
                                 "--force", *self.extra_args, "--", *argv],
                                env=self.env, rss_of=_rss_of(argv, rss))
            archive = out / f"{run_id}.tar.gz"
            if done.failure():
                return measurement(self.name, done)
            if not archive.exists():
                return measurement(self.name, _failed(done, f"no archive at {archive}"))
            return measurement(self.name, done, read_runner_archive(archive))
        finally:
            shutil.rmtree(out, ignore_errors=True)


class Bpftrace(Variant):
    """A bpftrace program on the workload's cgroup, started before the command.

    bpftrace's own start-up (compile, attach) is outside the measurement, as
    the command's own time excludes it anyway. The command starts only once
    bpftrace says every probe is attached: with `ATTACHED_ENV` set it writes
    `ATTACHED_ENV` on stderr at that point (the hook its own runtime tests
    use; BEGIN can fire before the last probe is attached, and output to
    `-o` is buffered until exit).
    """

    def __init__(self, name: str, program: str, cgroup: Cgroup, work: Path,
                 check: bool) -> None:
        self.name = name
        self.program = BPFTRACE_DIR / program
        self.cgroup = cgroup
        self.work = work
        self.check = check

    def unavailable(self) -> str | None:
        return None if shutil.which("bpftrace") else "bpftrace is not installed"

    def measure(self, argv: Sequence[str], tag: str, rss: bool = False) -> Measurement:
        out, err = (self.work / f"{self.name}.{ext}" for ext in ("out", "err"))
        out.unlink(missing_ok=True)
        with err.open("w") as err_file:
            tracer = subprocess.Popen(
                ["bpftrace", "-o", str(out), str(self.program), str(self.cgroup.id)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
                env={**os.environ, ATTACHED_ENV: "1"},
            )
            try:
                if why := _wait_attached(tracer, err):
                    return Measurement(self.name, None, 0.0, 0, error=why + _tail(err))
                done = run_measured(argv, preexec=self.cgroup.join,
                                    rss_of=_rss_of(argv, rss))
            finally:
                _stop(tracer)
        capture = read_bpftrace_output(out, err.read_text()) if self.check else None
        m = measurement(self.name, done, capture)
        if m.events_ok is False:  # keep the evidence of a miss for inspection
            kept = self.work / f"{self.name}-{tag}.out"
            out.replace(kept)
            return replace(m, extra={**m.extra, "kept_output": str(kept)})
        out.unlink(missing_ok=True)
        return m


def _rss_of(argv: Sequence[str], rss: bool) -> str | None:
    return argv[0] if rss else None


def _wait_attached(tracer: subprocess.Popen[bytes], err: Path) -> str | None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while ATTACHED_ENV not in err.read_text(errors="replace"):
        if tracer.poll() is not None:
            return f"bpftrace exited {tracer.returncode} before attaching"
        if time.monotonic() > deadline:
            return f"bpftrace not attached after {READY_TIMEOUT_S:.0f} s"
        time.sleep(0.02)
    return None


def _stop(tracer: subprocess.Popen[bytes]) -> None:
    """SIGINT lets bpftrace drain its buffers and print its maps and lost counts."""
    if tracer.poll() is None:
        tracer.send_signal(signal.SIGINT)
    try:
        tracer.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        tracer.kill()
        tracer.wait()


def _tail(path: Path) -> str:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return f": {lines[-1][:200]}" if lines else ""


def _failed(done: Finished, why: str) -> Finished:
    return replace(done, returncode=1, stderr=f"{done.stderr}\n{why}")
