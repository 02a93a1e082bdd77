"""Sampling a process tree's memory while a named command is alive in it.

GNU time gives the runner's peak RSS over its whole life; that cannot tell
capture (which must stay flat however long the command runs) from the
post-run normalization. This sampler reads /proc every few tens of
milliseconds and keeps two peaks: while a process called `marker` (the
watched command) is in the tree, and overall. Only the memory probe uses it:
it costs the harness a little CPU, which would perturb timed runs.
"""

from __future__ import annotations

import threading
from pathlib import Path

PROC = Path("/proc")
COMM_MAX = 15  # the kernel truncates comm to 15 characters


class RssSampler:
    """Peaks of the largest VmRSS in the tree under `root`, split by `marker`."""

    def __init__(self, root: int, marker: str, interval_s: float = 0.02) -> None:
        self.root = root
        self.marker = marker[:COMM_MAX]
        self.interval_s = interval_s
        self.while_marker_kib = 0
        self.overall_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            tree = list(_tree(self.root))
            peak = max((_rss_kib(p) for p in tree), default=0)
            self.overall_kib = max(self.overall_kib, peak)
            if any(_comm(p) == self.marker for p in tree):
                self.while_marker_kib = max(self.while_marker_kib, peak)


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in _names(PROC / str(p) / "task"):
            todo += [int(c) for c in _text(PROC / str(p) / "task" / task / "children").split()]
    return out


def _rss_kib(pid: int) -> int:
    for line in _text(PROC / str(pid) / "status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _comm(pid: int) -> str:
    return _text(PROC / str(pid) / "comm").strip()


def _text(path: Path) -> str:
    """The file's text; empty when the process has gone meanwhile."""
    try:
        return path.read_text()
    except OSError:
        return ""


def _names(path: Path) -> list[str]:
    """The directory's entries; none when the process has gone meanwhile."""
    try:
        return [e.name for e in path.iterdir()]
    except OSError:
        return []
