"""`bench.scaling`'s three tables, from its samples (no measuring here).

1. Runs: per size, paths variant and runner, the medians of ready after
   exit (and that per 100k events), each process's own peak RSS, and which
   pass normalized (the runner's `run.after_exit` log; n/a in daemon mode,
   whose log is the daemon's).
2. Offline normalize: per size, paths variant and tree, events per wall and
   per CPU second of `normalize`, stage B's CPU seconds, peak RSS.
3. Linearity and flatness: per runner (or tree) and paths variant, the
   least-squares line of the median seconds against events, and the spread
   of each median peak RSS over the sizes (own: the runner process's, or
   the offline normalize process's for a tree).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from bench.scaling_fit import fit_line, per_100k, spread
from bench.table import render

if TYPE_CHECKING:
    from bench.scaling import RunSample, SizeResult

THIS = "this"
NA = "n/a"


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values present, None when there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def num(value: float | None, fmt: str = ".0f") -> str:
    """`value` formatted, or n/a."""
    return NA if value is None else format(value, fmt)


def _runs(result: SizeResult, runner: str) -> list[RunSample]:
    return [s for s in result.runs if s.runner == runner and s.error is None]


RSS_COLUMNS: dict[str, Callable[[RunSample], float | None]] = {
    "runner": lambda s: s.runner_rss_mib,
    "live": lambda s: s.live_rss_mib,
    "largest (%M)": lambda s: s.largest_rss_mib,
}
"""The peak RSS figures of a run, per process: the runner's own, its live process's, GNU time's %M."""


def runs_table(results: list[SizeResult], runners: list[str]) -> str:
    """Table 1: per size, paths and runner."""
    headers = ["events", "paths", "runner", "runs", "ready after exit s (median, max)", "ready s per 100k",
               *(f"{name} RSS MiB" for name in RSS_COLUMNS), "drops", "all events", "normalized by"]
    rows = []
    for r in results:
        for name in runners:
            every = [s for s in r.runs if s.runner == name]
            runs = _runs(r, name)
            ready = [s.ready_after_exit_s for s in runs if s.ready_after_exit_s is not None]
            ok = [s.events_ok for s in runs]
            rows.append([
                f"{r.size:,}", r.paths, name, f"{len(runs)}/{len(every)}",
                f"{statistics.median(ready):.3f}, {max(ready):.3f}" if ready else NA,
                num(per_100k(median(ready), r.size), ".3f"),
                *(num(median([pick(s) for s in runs])) for pick in RSS_COLUMNS.values()),
                str(sum(s.drops or 0 for s in runs)),
                "yes" if ok and all(ok) else "NO",
                " ".join(sorted({str(s.after_exit.get("normalized_by", NA)) for s in runs})) or NA,
            ])
    return render(headers, rows)


def speed_table(results: list[SizeResult], trees: list[str]) -> str:
    """Table 2: offline normalize of this runner's spools, per tree."""
    headers = ["events", "paths", "tree", "normalize ev per wall s", "normalize ev per cpu s",
               "stage B cpu s", "normalize peak RSS MiB"]
    rows = []
    for r in results:
        for tree in trees:
            got = r.speed.get(tree, [])
            rows.append([
                f"{r.size:,}", r.paths, tree,
                num(median([x["events"] / x["normalize_wall_s"] for x in got if x.get("normalize_wall_s")]),
                    ",.0f"),
                num(median([x.get("events_per_cpu_s") for x in got]), ",.0f"),
                num(median([x.get("stage_b_cpu_s") for x in got]), ".3f"),
                num(median([x["peak_rss_kib"] / 1024 for x in got if x.get("peak_rss_kib")])),
            ])
    return render(headers, rows)


def spread_text(values: list[float | None]) -> str:
    """`spread (min-max)` of the medians over the sizes, n/a without two of them."""
    present = [v for v in values if v is not None]
    width = spread(present)
    return NA if width is None else f"{width:.0f} ({min(present):.0f}-{max(present):.0f})"


def fit_cells(points: list[tuple[int, float]]) -> list[str]:
    """Slope per 100k events, intercept, largest residual and R² of the line through `points`."""
    fit = fit_line(points)
    if fit is None:
        return [NA] * 4
    return [f"{fit.slope_s_per_100k:.3f}", f"{fit.intercept_s:+.3f}", f"{fit.max_residual_s:.3f}",
            num(fit.r2, ".4f")]


def linearity_table(results: list[SizeResult], runners: list[str], trees: list[str]) -> str:
    """Table 3: for each runner and paths variant, ready after exit's line and each RSS spread; for
    each tree, normalize CPU seconds' line and its peak RSS spread."""
    headers = ["who", "paths", "sizes", "s per 100k (slope)", "intercept s", "max residual s", "R²",
               "own RSS spread MiB", "live RSS spread MiB", "largest (%M) RSS spread MiB"]
    rows = []
    for paths in dict.fromkeys(r.paths for r in results):
        mine = [r for r in results if r.paths == paths]
        for name in runners:
            ready = [(r.size, median([s.ready_after_exit_s for s in _runs(r, name)])) for r in mine]
            points = [(n, y) for n, y in ready if y is not None]
            rows.append([f"{name}: ready after exit", paths, str(len(points)), *fit_cells(points),
                         *(spread_text([median([pick(s) for s in _runs(r, name)]) for r in mine])
                           for pick in RSS_COLUMNS.values())])
        for tree in trees:
            cpu = [(r.size, median([x.get("normalize_cpu_s") for x in r.speed.get(tree, [])])) for r in mine]
            points = [(n, y) for n, y in cpu if y is not None]
            rss = [median([x["peak_rss_kib"] / 1024 for x in r.speed.get(tree, []) if x.get("peak_rss_kib")])
                   for r in mine]
            rows.append([f"{tree} tree: normalize cpu s", paths, str(len(points)), *fit_cells(points),
                         spread_text(rss), "", ""])
    return render(headers, rows)


def tables(results: list[SizeResult], runners: list[str], trees: list[str]) -> str:
    """All three tables, each under a one-line title."""
    return "\n\n".join([
        "Runs (medians; RSS per process from taskstats, %M from GNU time):\n"
        + runs_table(results, runners),
        "Offline normalize of this runner's spools (bench/normalize_speed.py):\n"
        + speed_table(results, trees),
        "Linearity (least squares over the sizes' medians) and flatness (largest minus smallest median):\n"
        + linearity_table(results, runners, trees),
    ])
