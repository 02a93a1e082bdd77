"""State shared by every measurement of one benchmark session.

One place resets the workload's scratch directory before each run (so every
repetition starts from the same files) and writes progress lines, so the
overhead loop and the probes cannot drift apart in how they run things.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.build import Tools
from bench.variants import Measurement, Variant


@dataclass
class Session:
    """The built tools, the workloads' scratch directory and the size mode.

    The scratch directory is on the disk filesystem by default, where the
    targets were set (there the in-kernel floor is 1.05-1.11x); `--scratch-
    tmpfs` trades that calibration for less noise (`procs.Tmpfs`).
    """

    tools: Tools
    scratch: Path
    quick: bool
    started: float = field(default_factory=time.monotonic)

    def measure(self, variant: Variant, argv: Sequence[str], tag: str,
                rss: bool = False) -> Measurement:
        """Runs `argv` under `variant` from a fresh, empty scratch directory.

        `os.sync()` first, so the previous run's writeback (a dev_job leaves
        thousands of dirty files) is not charged to this one.
        """
        self.scratch.mkdir(parents=True, exist_ok=True)
        for child in self.scratch.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        os.sync()
        return variant.measure(argv, tag, rss)

    def log(self, message: str) -> None:
        """A progress line on stderr, stamped with the session's elapsed time."""
        print(f"[{time.monotonic() - self.started:7.1f}s] {message}", file=sys.stderr,
              flush=True)


def describe(m: Measurement) -> str:
    """One progress-line summary of a measurement."""
    if m.error:
        return f"{m.variant}: ERROR {m.error}"
    parts = [f"{m.variant}: own {m.own_s:.3f} s, wall {m.wall_s:.2f} s"]
    if m.drops is not None:
        parts.append(f"drops {m.drops}")
    parts.extend(f"{c.label} {c.seen}/{c.expected}" for c in m.events if not c.ok)
    return ", ".join(parts)
