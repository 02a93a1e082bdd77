"""The overhead benchmark: every variant on one workload, interleaved.

Repetitions alternate the variants (rotating the order each round so none
always runs first, right after the previous variant's clean-up), after one
untimed warm-up run of the bare command to fill the page cache. Each
variant's time is the median of its repetitions' own times, and a ratio is
that median over the bare median. The runner passes a workload when its ratio
is within the target and every repetition ran, with zero drops and every
event; a repetition that failed makes the row ERROR.

The per-round ratios (`paired`: each round's variant time over the same
round's bare time) are reported beside them, as median and range: the bare
command's own time drifts between rounds (ext4 state, other work), and a
ratio of medians can move by more than a target's margin with it, while a
round's variants share that round's conditions. Their spread is how much a
single session's ratio can be trusted.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.session import Session, describe
from bench.suite import Workload
from bench.variants import Measurement, Variant

BARE, RUNNER = "bare", "runner"


@dataclass
class WorkloadResult:
    """Medians, ratios and the verdict for one workload."""

    workload: str
    target: float
    medians: dict[str, float | None]
    ratios: dict[str, float | None]
    runner_vs: dict[str, float | None]
    status: str
    notes: list[str]
    runs: dict[str, list[Measurement]] = field(default_factory=dict)
    wall_ratios: dict[str, float | None] = field(default_factory=dict)
    """Whole wall (start, run, stop, publish: the archive is ready) median over bare's wall median."""
    paired: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Per variant with at least one clean round: (median, min, max) of its per-round ratios."""


def bench_workload(session: Session, workload: Workload, variants: Sequence[Variant],
                   reps: int, skipped: dict[str, str]) -> WorkloadResult:
    """Runs every variant `reps` times on `workload`, interleaved."""
    argv = workload.command(session.tools, session.scratch, session.quick)
    bare = next(v for v in variants if v.name == BARE)
    session.log(f"{workload.name}: warm-up ({' '.join(argv[:1])} ...)")
    session.measure(bare, argv, f"{workload.name}-warmup")
    runs: dict[str, list[Measurement]] = {v.name: [] for v in variants}
    for rep in range(reps):
        k = rep % len(variants)
        for variant in [*variants[k:], *variants[:k]]:
            m = session.measure(variant, argv, f"{workload.name}-{rep}")
            runs[variant.name].append(m)
            session.log(f"{workload.name} rep {rep + 1}/{reps} {describe(m)}")
    return summarize(workload, runs, skipped)


def summarize(workload: Workload, runs: dict[str, list[Measurement]],
              skipped: dict[str, str]) -> WorkloadResult:
    """Medians, ratios against bare, the runner against each peer, and the verdict."""
    medians = {name: _median(ms) for name, ms in runs.items()}
    medians.update({name: None for name in skipped})
    base = medians.get(BARE)
    ratios = {name: _div(t, base) for name, t in medians.items() if name != BARE}
    ours = medians.get(RUNNER)
    runner_vs = {name: _div(ours, t) for name, t in medians.items()
                 if name not in (BARE, RUNNER)}
    notes = [f"{name}: {why}" for name, why in skipped.items()]
    notes += sorted({f"{m.variant}: {m.error}" for ms in runs.values() for m in ms if m.error})
    status = _judge(workload, ratios.get(RUNNER), runs.get(RUNNER, []), notes)
    walls = {name: _median_wall(ms) for name, ms in runs.items()}
    wall_ratios = {name: _div(t, walls.get(BARE)) for name, t in walls.items() if name != BARE}
    return WorkloadResult(workload.name, workload.target, medians, ratios, runner_vs,
                          status, notes, runs, wall_ratios, paired_ratios(runs))


def paired_ratios(runs: dict[str, list[Measurement]]) -> dict[str, tuple[float, float, float]]:
    """(median, min, max) of each variant's own time over bare's in the same round; a round in
    which either failed is left out."""
    out = {}
    for name, ms in runs.items():
        if name == BARE:
            continue
        per_round = [m.own_s / b.own_s for m, b in zip(ms, runs.get(BARE, []), strict=False)
                     if not m.error and not b.error and m.own_s is not None and b.own_s]
        if per_round:
            out[name] = (statistics.median(per_round), min(per_round), max(per_round))
    return out


def _judge(workload: Workload, ratio: float | None, ours: list[Measurement],
           notes: list[str]) -> str:
    if not ours:
        return "n/a"
    if ratio is None:
        return "ERROR"
    problems = []
    if failed := sum(1 for m in ours if m.error):
        problems.append(f"{failed} of {len(ours)} runs failed")
    if ratio > workload.target:
        problems.append(f"{ratio:.2f}x > {workload.target:.2f}x")
    drops = sum(m.drops or 0 for m in ours)
    if drops:
        problems.append(f"{drops} drops")
    for m in ours:
        problems += [f"{c.label} {c.seen}/{c.expected}" for c in m.events if not c.ok]
    notes += [f"runner: {p}" for p in dict.fromkeys(problems)]
    if failed:
        return "ERROR"
    return "FAIL" if problems else "PASS"


def _median(ms: list[Measurement]) -> float | None:
    times = [m.own_s for m in ms if m.own_s is not None and not m.error]
    return statistics.median(times) if times else None


def _median_wall(ms: list[Measurement]) -> float | None:
    walls = [m.wall_s for m in ms if not m.error]
    return statistics.median(walls) if walls else None


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
