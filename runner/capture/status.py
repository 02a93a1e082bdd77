"""The one-line live status on a terminal, and the end-of-run summary."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from runner.capture.terminal import StatusRow
from runner.display import printable_lines

if TYPE_CHECKING:  # the daemon client draws the status line without importing the normalizer
    from normalizer.build import NormalizedRun
    from normalizer.surface import Preview

REFRESH_S = 0.25


class LiveStatus:
    """`events · drops · elapsed` on the terminal's reserved last row (terminal.py), or nothing."""

    def __init__(self) -> None:
        self._row = StatusRow()
        self._start = time.monotonic()
        self._next = self._start + REFRESH_S

    def update(self, events: int, drops: Callable[[], dict[str, int]], elapsed: float | None = None) -> None:
        """Redraw at most every REFRESH_S; `elapsed` when the run's clock is elsewhere (the daemon's)."""
        now = time.monotonic()
        if not self._row.enabled or now < self._next:
            return
        self._next = now + REFRESH_S
        dropped = sum(drops().values())
        seconds = now - self._start if elapsed is None else elapsed
        self._row.draw(f"[assay-runner] {events} events · {dropped} drops · {seconds:.1f}s")

    def clear(self) -> None:
        """Give the terminal back whole (idempotent): called when the command has exited or on the way out."""
        self._row.release()


def _preview(items: Preview) -> str:
    """The count, and the first values the normalizer kept (normalizer/surface.py `PREVIEW_VALUES`)."""
    shown = ", ".join(items.first)
    more = f" (+{items.count - len(items.first)} more)" if items.count > len(items.first) else ""
    return f"{items.count}" + (f": {shown}{more}" if items.count else "")


def summary(run: NormalizedRun, exit_code: int, elapsed: float, archive: str) -> str:
    """A short human summary of what the command touched and how well it was seen."""
    h, seen = run.health, run.preview
    lines = [
        f"assay-runner: command exited {exit_code} after {elapsed:.2f}s",
        f"  files written:     {_preview(seen.written)}",
        f"  files touched:     {seen.files.count}",
        f"  endpoints:         {_preview(seen.endpoints)}",
        f"  programs executed: {_preview(seen.execs)}",
    ]
    if seen.blocked.count:
        lines.append(f"  policy blocks:     {_preview(seen.blocked)}")
    ended = [n.split(": ", 1)[1] for n in h.notes if n.startswith("s2_run_ended:")]
    lines += [f"  ended from outside: {why}" for why in ended]
    limits = [n.split(": ", 1)[1] for n in h.notes if n.startswith("s3_resource_limits:")]
    lines += [f"  resource limits:   {hit}" for hit in limits]
    lines += [
        f"  health:            kernel_layer={h.kernel_layer} drops={h.ringbuf_drops} "
        f"cgroup_correlation={h.cgroup_correlation} network={h.network_protocol_coverage}",
        f"  archive:           {archive}",
    ]
    return printable_lines(lines)
