"""The four overhead workloads: what they run at full and quick size, and the
slowdown target the runner must meet on each.

Sizes are operation counts, not durations, so every variant of a workload
makes the same syscalls and the ratios compare like with like.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.build import Tools

Argv = Callable[[Tools, Path, tuple[int, ...]], list[str]]


@dataclass(frozen=True)
class Workload:
    """One benchmark workload."""

    name: str
    target: float
    summary: str
    full: tuple[int, ...]
    quick: tuple[int, ...]
    argv: Argv

    def command(self, tools: Tools, scratch: Path, quick: bool, scale: int = 1) -> list[str]:
        """The command line, with every size multiplied by `scale`."""
        sizes = tuple(n * scale for n in (self.quick if quick else self.full))
        return self.argv(tools, scratch, sizes)


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "open_heavy", 1.20, "openat of existing, missing and created files",
        full=(200_000,), quick=(20_000,),
        argv=lambda t, s, n: [t.program("open_heavy"), str(s), str(n[0])],
    ),
    Workload(
        "exec_heavy", 1.12, "fork+exec of /bin/true, one after another",
        full=(1_500,), quick=(150,),
        argv=lambda t, s, n: [t.program("exec_heavy"), str(n[0])],
    ),
    Workload(
        "network", 1.25, "TCP connects and UDP sendto on loopback",
        full=(20_000, 60_000), quick=(2_000, 6_000),
        argv=lambda t, s, n: [t.program("network"), str(n[0]), str(n[1])],
    ),
    Workload(
        "dev_job", 1.08, "git on a fresh repo, stdlib imports, a tiny pytest",
        full=(3_000,), quick=(300,),
        argv=lambda t, s, n: [t.python, t.script("dev_job.py"), str(s), str(n[0]), t.python],
    ),
)


def by_name(name: str) -> Workload:
    """The workload called `name`."""
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise KeyError(name)
