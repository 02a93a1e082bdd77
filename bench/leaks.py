"""What a batch of runs left behind on the host, counted so only the batch's own leftovers count.

The soak (bench/soak.py) gives every run an id starting with one token and
every command an argv holding it, so its leftovers can be told from what
other users of the host (tests, benchmarks, other runs) have live:

- cgroups: run cgroups under `<cgroup2>/assay-runner/` (`run_parent`) named after the
  token (the runner names them `RUN_ID-PID-HEX`);
- processes: any process whose command line holds the token: a command the
  run left running, a runner or daemon worker that never exited, or the
  detached child that releases a monitor's BPF references in the background;
- BPF programs: program fds held by those processes (a tracepoint stays
  attached exactly as long as some process holds its fds, so a program
  cannot outlive every process without being pinned, which the runner never
  does), read from /proc/PID/fdinfo (`prog_id:`), as this host's bpftool
  cannot list holders;
- file descriptors and programs of one process (the daemon), before and after.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import cgroup2_root
from runner.capture.cgroup import parent_name


def run_parent() -> Path:
    """Where the runner makes run cgroups: `<cgroup2>/assay-runner/`, or the directory named by
    ASSAY_RUNNER_CGROUP_PARENT (a CI job's, or a test process's, own parent)."""
    return cgroup2_root() / parent_name()


@dataclass(frozen=True)
class Census:
    """The batch's own leftovers at one moment."""

    cgroups: list[str] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)
    """`PID comm` of each leftover process."""
    program_ids: list[int] = field(default_factory=list)
    fds: int = 0
    """File descriptors held by the leftover processes."""

    @property
    def clean(self) -> bool:
        return not (self.cgroups or self.processes or self.program_ids or self.fds)

    def as_dict(self) -> dict[str, object]:
        return {"cgroups": len(self.cgroups), "processes": len(self.processes),
                "attached_programs": len(self.program_ids), "file_descriptors": self.fds,
                "cgroup_names": self.cgroups[:20], "process_names": self.processes[:20]}


def _cmdline(pid: str) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def fd_count(pid: int | str) -> int:
    """Open file descriptors of `pid` (0 once it is gone)."""
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return 0


def program_ids(pid: int | str) -> list[int]:
    """Ids of the BPF programs whose fds `pid` holds."""
    ids: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
    return sorted(ids)


def processes_holding(token: str, exclude: set[int]) -> list[str]:
    """Pids (as strings) of live processes whose argv holds `token`, but for `exclude`."""
    needle = token.encode()
    return [p.name for p in Path("/proc").glob("[0-9]*")
            if int(p.name) not in exclude and needle in _cmdline(p.name)]


def cgroup_pids(path: Path) -> set[str]:
    """Pids in the cgroup at `path` and below it (a command's processes need not hold the token)."""
    pids: set[str] = set()
    for procs in path.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids.update(procs.read_text().split())
    return pids


def census(token: str, exclude: set[int] | None = None) -> Census:
    """The leftovers of runs whose ids and commands hold `token` (processes in `exclude` are
    the harness's own, such as the daemon it runs on purpose)."""
    parent = run_parent()
    cgroups = sorted(p.name for p in parent.iterdir() if token in p.name) if parent.is_dir() else []
    pids = sorted(set(processes_holding(token, (exclude or set()) | {os.getpid()}))
                  | {pid for name in cgroups for pid in cgroup_pids(parent / name)})
    names = []
    for pid in pids:
        with contextlib.suppress(OSError):
            names.append(f"{pid} {Path(f'/proc/{pid}/comm').read_text().strip()}")
    programs = sorted({i for pid in pids for i in program_ids(pid)})
    return Census(cgroups=cgroups, processes=names, program_ids=programs,
                  fds=sum(fd_count(pid) for pid in pids))


def settled_census(token: str, exclude: set[int] | None = None, within_s: float = 60.0) -> Census:
    """The census once the background detaches have had time to finish (each tracepoint
    release waits for an RCU grace period: about 1.4 s per monitor, longer on a busy host).

    Polls until clean or `within_s` passes; what is left then is a leak.
    """
    deadline = time.monotonic() + within_s
    while True:
        now = census(token, exclude)
        if now.clean or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def rss_kib(pid: int) -> int:
    """Resident memory of `pid` (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def host_program_count() -> int | None:
    """Every BPF program loaded on the host, by bpftool (context only: other users of the
    host load programs too); None without bpftool."""
    try:
        done = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                              check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return len(json.loads(done.stdout or "[]"))
