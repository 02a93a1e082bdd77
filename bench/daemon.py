"""Daemon mode in the benchmark: the runner through `assay-runner daemon`.

`DaemonService` runs a daemon on a private socket for the session (root
callers only, the default config). `DaemonRunner` is the `Runner` variant
with `--daemon --socket`, so overhead workloads and start-to-exec measure it
exactly as direct mode. Two probes are daemon-only: the whole wall time of a
`/bin/true` run (client start to client exit) next to direct mode and
bpftrace running the same program, and the daemon's memory across many
back-to-back runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.procs import Cgroup, run_measured
from bench.session import Session
from bench.variants import BPFTRACE_DIR, Runner

TRUE = "/bin/true"
PYTHON_CLIENT = "assay-runner-py"
"""The Python CLI beside `make setup`'s fast C client (runner/daemon/fastclient.c)."""
TRUE_TARGET_S = 0.060
TRUE_START_TARGET_S = 0.020
MEMORY_RUNS = 200
MEMORY_RUNS_QUICK = 20
MEMORY_GROWTH_LIMIT = 1.10


class DaemonService:
    """`assay-runner daemon` on `socket` for the length of a `with` block."""

    def __init__(self, binary: str, socket: Path, log: Path, config: Path | None = None) -> None:
        self.binary, self.socket, self.log, self.config = binary, socket, log, config
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> DaemonService:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        config = ["--config", str(self.config)] if self.config else []
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([self.binary, "--log-format", "json", "daemon", *config, "--socket",
                                          str(self.socket)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not start: {self.log.read_text()[-500:]}")
            time.sleep(0.05)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)

    @property
    def pid(self) -> int:
        """The daemon's main process."""
        assert self.proc is not None
        return self.proc.pid

    def rss_kib(self) -> int:
        """Resident memory of the daemon's main and sensor processes (not its short-lived workers)."""
        assert self.proc is not None
        return _rss_kib(self.proc.pid) + _rss_kib(self.sensor_pid())

    def peaks_kib(self) -> dict[str, int]:
        """The daemon's and its sensor's own peak resident memory so far (VmHWM)."""
        return {"daemon": _rss_kib(self.pid, "VmHWM"), "sensor": _rss_kib(self.sensor_pid(), "VmHWM")}

    def idle_spare(self) -> set[int]:
        """The daemon's spare worker (runner/daemon/spare.py) while it waits: a child of the daemon,
        not its sensor, holding nothing but stdin, stdout, stderr and the socket it waits on. A run
        worker that never exited holds more (its connection, channel, report pipe), so it is never
        taken for the spare."""
        assert self.proc is not None
        sensor = self.sensor_pid()
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            for pid in {int(c) for c in children} - {sensor}:
                others = {fd: target for fd, target in _fd_targets(pid).items() if fd > 2}
                if len(others) == 1 and next(iter(others.values())).startswith("socket:"):
                    return {pid}
        return set()

    def sensor_pid(self) -> int:
        """The sensor process's pid, from the daemon's `daemon.sensor_loaded` log line."""
        for line in self.log.read_text().splitlines():
            if '"daemon.sensor_loaded"' in line:
                return int(json.loads(line)["sensor_pid"])
        raise RuntimeError("the daemon logged no sensor_pid")


def _fd_targets(pid: int) -> dict[int, str]:
    targets = {}
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                targets[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return targets


def _rss_kib(pid: int, key: str = "VmRSS") -> int:
    """A live process's resident memory now (VmRSS) or its peak so far (VmHWM), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} for {pid}")


class DaemonRunner(Runner):
    """`assay-runner run --daemon`: everything else as the direct-mode variant."""

    name = "daemon"

    def __init__(self, binary: str, out_dir: Path, socket: Path) -> None:
        super().__init__(binary, out_dir, ("--daemon", "--socket", str(socket)))


def true_wall(session: Session, binary: str, service: DaemonService, cgroup: Cgroup,
              reps: int) -> dict[str, Any]:
    """Whole wall time of a `/bin/true` run: bare, direct, daemon client, bpftrace -c.

    With `make setup`'s fast client as `binary`, the same daemon run through
    the Python client (`assay-runner-py` beside it) is measured in the same
    rounds too, so the client's share is shown, not guessed.
    """
    out = session.scratch.parent / "true-runs"
    out.mkdir(parents=True, exist_ok=True)
    daemon_run = ["run", "--daemon", "--socket", str(service.socket), "--out", str(out), "--run-id", "t",
                  "--force", "--", TRUE]
    commands: dict[str, Sequence[str]] = {
        "bare": [TRUE],
        "direct": [binary, "run", "--direct", "--out", str(out), "--run-id", "t", "--force", "--", TRUE],
        "daemon": [binary, *daemon_run],
        "bpftrace": ["bpftrace", str(BPFTRACE_DIR / "monitor.bt"), str(cgroup.id), "-c", TRUE],
    }
    python_client = Path(binary).with_name(PYTHON_CLIENT)
    if python_client.exists():
        commands["python client"] = [str(python_client), *daemon_run]
    walls: dict[str, list[float]] = {name: [] for name in commands}
    errors: list[str] = []
    for rep in range(reps):
        for name, argv in commands.items():
            done = run_measured(argv)
            if done.failure():
                errors.append(f"{name}: {done.failure()}")
                continue
            walls[name].append(done.wall_s)
        session.log(f"/bin/true wall rep {rep + 1}/{reps}: " + ", ".join(
            f"{n} {w[-1]:.3f}s" for n, w in walls.items() if w))
    medians = {n: statistics.median(w) for n, w in walls.items() if w}
    return {"walls_s": walls, "medians_s": medians, "errors": errors}


def daemon_memory(session: Session, binary: str, service: DaemonService) -> dict[str, Any]:
    """The daemon's RSS (main and sensor process) after each of many back-to-back `/bin/true` runs."""
    runs = MEMORY_RUNS_QUICK if session.quick else MEMORY_RUNS
    out = session.scratch.parent / "memory-runs"
    out.mkdir(parents=True, exist_ok=True)
    samples: list[int] = []
    failures = 0
    for i in range(runs):
        done = run_measured([binary, "run", "--daemon", "--socket", str(service.socket), "--out", str(out),
                             "--run-id", "m", "--force", "--", TRUE])
        failures += bool(done.failure())
        samples.append(service.rss_kib())
        if (i + 1) % 50 == 0:
            session.log(f"daemon memory: {i + 1}/{runs} runs, RSS {samples[-1] / 1024:.1f} MiB")
    settled = samples[min(9, len(samples) - 1)]  # after the first runs warmed the allocator
    return {"runs": runs, "failures": failures, "rss_kib": samples,
            "growth": samples[-1] / settled if settled else None}
