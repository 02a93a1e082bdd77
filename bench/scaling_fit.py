"""The pure parts of `bench.scaling`: whose memory is whose, and linearity and flatness from numbers.

Archive-ready time should grow linearly with the event count
and that peak RSS stay flat. Neither is asserted here: a least-squares line
through (events, seconds) gives the slope per 100k events, the intercept
and the largest residual, so a reader sees how far the points are from a
line; the RSS spread is the largest peak minus the smallest over the sizes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from bench.taskstats import ProcessPeak

PER = 100_000
"""Slopes and per-size rates are per this many events."""
LIVE_PREFIX = "python"
"""The live normalizer is `sys.executable -I -m runner.capture.live_child`: its comm is python's."""


@dataclass(frozen=True)
class Fit:
    """A least-squares line through (events, seconds)."""

    slope_s_per_100k: float
    intercept_s: float
    max_residual_s: float
    """The largest |measured - line| over the points."""
    r2: float | None
    """1 - residual/total sum of squares; None when all the seconds are equal."""


def fit_line(points: list[tuple[int, float]]) -> Fit | None:
    """The least-squares line through `points` (events, seconds); None with fewer than two sizes."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    intercept = my - slope * mx
    residuals = [y - (intercept + slope * x) for x, y in points]
    total = sum((y - my) ** 2 for _, y in points)
    return Fit(slope * PER, intercept, max(abs(r) for r in residuals),
               1 - sum(r * r for r in residuals) / total if total else None)


def spread(values: Sequence[float | None]) -> float | None:
    """Largest minus smallest of the values present; None when fewer than two are."""
    present = [v for v in values if v is not None]
    return max(present) - min(present) if len(present) >= 2 else None


def per_100k(seconds: float | None, events: int) -> float | None:
    """Seconds per 100k events at one size."""
    return None if seconds is None or events <= 0 else seconds * PER / events


@dataclass(frozen=True)
class Roles:
    """The processes of one `assay-runner run` under GNU time, from their exit records."""

    runner: ProcessPeak | None
    """GNU time's child: the runner (the fast client execs the Python CLI in place for --direct)."""
    live: ProcessPeak | None
    """The runner's live normalizer child; None when it normalized in its own thread or offline.
    The others are the command's processes and the runner's forks on the way to its exec (each
    counting the runner's pages it shares until then)."""


def roles(peaks: dict[int, ProcessPeak], time_pid: int) -> Roles:
    """Who is who among `peaks` (every exited process under GNU time at `time_pid`)."""
    runner = next((p for p in peaks.values() if p.ppid == time_pid), None)
    live = [p for p in peaks.values()
            if runner and p.ppid == runner.tgid and p.comm.startswith(LIVE_PREFIX)]
    return Roles(runner, max(live, key=lambda p: p.peak_rss_kib, default=None))


def daemon_worker(peaks: dict[int, ProcessPeak], daemon_pid: int, sensor_pid: int) -> ProcessPeak | None:
    """In daemon mode, the run's worker among the processes that exited under the daemon since the
    run began: a child of the daemon other than its sensor (forked from the daemon, its peak counts
    the daemon's pages it shares since the fork); the largest if a spare died meanwhile too."""
    workers = [p for p in peaks.values() if p.ppid == daemon_pid and p.tgid != sensor_pid]
    return max(workers, key=lambda p: p.peak_rss_kib, default=None)


def after_exit_log(stderr: str) -> dict[str, object]:
    """The runner's `run.after_exit` log line (runner/capture/session.py), {} when it has none."""
    for line in stderr.splitlines():
        if '"run.after_exit"' in line:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                return {k: v for k, v in entry.items()
                        if k not in ("event", "level", "timestamp", "component")}
    return {}


def mib(kib: int | None) -> float | None:
    """KiB as MiB."""
    return None if kib is None else kib / 1024
