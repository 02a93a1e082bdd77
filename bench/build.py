"""Compiling the C workloads: built fresh by every session, never committed.

Binaries go to a build directory outside the tree so a checkout never holds a
stale one; `-O2 -Werror` keeps the loops tight and warnings from hiding bugs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

WORKLOAD_DIR = Path(__file__).resolve().parent / "workloads"
C_PROGRAMS = ("open_heavy", "exec_heavy", "network", "start_stamp")
CFLAGS = ("-O2", "-Wall", "-Wextra", "-Werror")


class BuildError(RuntimeError):
    """A workload did not compile; the message holds gcc's output."""


@dataclass(frozen=True)
class Tools:
    """Where the built workloads are, and the interpreter for script workloads."""

    bin_dir: Path
    python: str = sys.executable

    def program(self, name: str) -> str:
        """Absolute path of a built C workload."""
        return str(self.bin_dir / name)

    @staticmethod
    def script(name: str) -> str:
        """Absolute path of a script workload."""
        return str(WORKLOAD_DIR / name)


def build(bin_dir: Path, cc: str = "gcc") -> Tools:
    """Compiles every C workload into `bin_dir`."""
    if shutil.which(cc) is None:
        raise BuildError(f"{cc} not found: the C workloads need a C compiler")
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in C_PROGRAMS:
        cmd = [cc, *CFLAGS, "-o", str(bin_dir / name), str(WORKLOAD_DIR / f"{name}.c")]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            raise BuildError(f"building {name} failed:\n{done.stderr}")
    return Tools(bin_dir=bin_dir)


def root_tools(work: Path) -> Tools | None:
    """The workloads built into `work`/bin, for a benchmark that runs the runner: None, with the
    reason on stderr, when this is not root (BPF, cgroups) or a workload does not compile."""
    if os.geteuid() != 0:
        print("bench: needs root (BPF, cgroups); run it with sudo", file=sys.stderr)
        return None
    work.mkdir(parents=True, exist_ok=True)
    try:
        return build(work / "bin")
    except BuildError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return None
