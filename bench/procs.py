"""Starting measured processes, and the cgroup that bpftrace peers filter on.

Every measured process runs with its stdout/stderr in temp files (not pipes:
the harness must not compete for the CPU by reading output while the command
runs, and a file cannot fill up and stall it).

Peak RSS, when asked for, comes from GNU time wrapped around the command, not
from the harness's own `wait4`: a child spawned straight from the harness
(vfork + exec) starts its `ru_maxrss` at the harness's high-water mark, which
after reading a large archive was 650 MiB, for a runner that used 150. The
peak while the watched command is still running comes from `rss.RssSampler`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.rss import RssSampler

DEFAULT_TIMEOUT_S = 900.0
GNU_TIME = "/usr/bin/time"


@dataclass(frozen=True)
class Finished:
    """A process that ran to completion (or was killed at its timeout)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    max_rss_kib: int | None = None
    rss_while_command_kib: int | None = None
    start_ns: int = 0
    timed_out: bool = False
    cpu_s: float | None = None
    """User+system CPU seconds of the process and the descendants it waited for (wait4)."""
    pid: int | None = None
    """The pid it had (GNU time's when peak RSS was asked for): its exit records' root."""

    def failure(self) -> str | None:
        """A one-line reason when the process did not succeed, else None."""
        if self.timed_out:
            return f"{self.argv[0]} timed out after {self.wall_s:.0f} s"
        if self.returncode != 0:
            tail = (self.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            return f"{Path(self.argv[0]).name} exited {self.returncode}: {tail[:200]}"
        return None


def run_measured(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    rss_of: str | None = None,
) -> Finished:
    """Runs `argv` to completion and returns its output, wall time and peak RSS.

    `start_ns` (CLOCK_REALTIME just before the spawn) lets a command that
    stamps its own start measure start-to-exec latency. `rss_of` (the
    watched command's executable) adds the peak RSS of the whole invocation
    and the peak while that command was still running.
    """
    with (tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err,
          tempfile.NamedTemporaryFile("r") as rss_file):
        rss = rss_of is not None
        spawned = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *argv] if rss else list(argv)
        start_ns = time.time_ns()
        start = time.monotonic()
        proc = subprocess.Popen(  # preexec (if any) only joins a cgroup
            spawned, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            env=env, preexec_fn=preexec,
        )
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(timeout_s, expire)
        timer.start()
        sampler = RssSampler(proc.pid, Path(rss_of).name) if rss_of else None
        try:
            with sampler or contextlib.nullcontext():
                _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Finished(
            argv=tuple(argv), returncode=proc.returncode,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
            wall_s=wall, max_rss_kib=_last_int(rss_file.read()) if rss else None,
            rss_while_command_kib=sampler.while_marker_kib if sampler else None,
            start_ns=start_ns,
            timed_out=expired.is_set(),
            cpu_s=usage.ru_utime + usage.ru_stime,
            pid=proc.pid,
        )


def _last_int(text: str) -> int | None:
    """GNU time's %M line (it is preceded by a line when the command failed)."""
    lines = text.strip().splitlines()
    return int(lines[-1]) if lines and lines[-1].isdigit() else None


def cgroup2_root() -> Path:
    """Where cgroup v2 is mounted (hybrid hosts have it at .../unified)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup2":
                return Path(fields[4])
    raise RuntimeError("no cgroup2 mount in /proc/self/mountinfo")


class Cgroup:
    """A fresh cgroup v2 for the workload, so a peer can filter on its id.

    The id a BPF program sees (`bpf_get_current_cgroup_id`) is the inode
    number of the cgroup's directory.
    """

    def __init__(self, name: str) -> None:
        self.path = cgroup2_root() / name
        self.path.mkdir(exist_ok=True)

    @property
    def id(self) -> int:
        """The cgroup id BPF programs compare against."""
        return self.path.stat().st_ino

    def join(self) -> None:
        """Moves the calling process into the cgroup (used as a preexec hook)."""
        (self.path / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def remove(self) -> None:
        """Removes the cgroup once its last process has gone."""
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)


class Tmpfs:
    """A tmpfs mounted over the scratch directory for one session.

    Workload files then live in memory, so a disk filesystem's journal and
    writeback add no noise to the loops being timed (bare open_heavy varied
    0.15-0.16 s on tmpfs against 0.18-0.34 s on ext4 in one session). Not
    /dev/shm: the runner's normalizer classes /dev paths as telemetry and
    drops the very events the harness counts.
    """

    def __init__(self, path: Path, size: str = "2g") -> None:
        self.path = path
        self.size = size
        self.mounted = False

    def __enter__(self) -> Tmpfs:
        self.path.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount(self.path):
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0755",
                            "assay-bench", str(self.path)], check=True)
            self.mounted = True
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.path)], check=False)
