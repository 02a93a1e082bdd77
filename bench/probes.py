"""The three probes besides overhead: start-to-exec latency, the sustained
event rate with zero drops, and whether peak memory grows with run length.

Each returns a `ProbeResult`: one row of the second table (metric, measured
value, target, status) plus the raw numbers for the JSON results.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.session import Session, describe
from bench.suite import by_name
from bench.variants import Measurement, Variant

START_TARGET_S = 0.4
MEMORY_GROWTH_LIMIT = 1.10
MEMORY_SCALE = 4
SATURATED = 0.9  # achieved/asked below this: the workload cannot go faster
RATES_FULL = (25_000, 50_000, 100_000, 200_000, 400_000, 800_000)
RATES_QUICK = (20_000, 80_000)


@dataclass(frozen=True)
class ProbeResult:
    """One probe's verdict and the numbers behind it."""

    metric: str
    value: str
    target: str
    status: str
    details: dict[str, Any] = field(default_factory=dict)


def start_to_exec(session: Session, runner: Variant, bare: Variant, reps: int,
                  label: str = "start-to-exec", target_s: float = START_TARGET_S,
                  others: Sequence[Variant] = ()) -> ProbeResult:
    """Realtime from spawning `assay-runner run` to the command's main().

    Includes the runner's Python start-up and the BPF load and attach
    (the compile too, when the compiled object is not cached yet), which is
    what a user waits for; the bare spawn is shown for reference. `others`
    (a baseline runner, the runner with its compile cache off) are measured
    in the same rounds and shown beside it, after one uncounted warm-up run
    each (a first run after a source or kernel change compiles: that cost
    is the cold runner's column). The daemon variant measures the same
    thing through the client.
    """
    argv = [session.tools.program("start_stamp")]
    variants = [bare, runner, *others]
    latencies: dict[str, list[float]] = {v.name: [] for v in variants}
    errors: list[str] = []
    for variant in (runner, *others):  # warm-up, not counted: fills the compiled-object cache
        session.log(f"start-to-exec warm-up {describe(session.measure(variant, argv, 'start-warm'))}")
    for rep in range(reps):
        for variant in variants:
            m = session.measure(variant, argv, f"start-{rep}")
            session.log(f"start-to-exec rep {rep + 1}/{reps} {describe(m)}")
            if m.error or "realtime_ns" not in m.extra:
                errors.append(f"{variant.name}: {m.error or 'no realtime stamp'}")
                continue
            latencies[variant.name].append((m.extra["realtime_ns"] - m.start_ns) / 1e9)
    ours = latencies[runner.name]
    if not ours:
        return ProbeResult(label, "n/a", f"<= {target_s} s", "ERROR", {"errors": errors})
    median = statistics.median(ours)
    bare_median = statistics.median(latencies[bare.name]) if latencies[bare.name] else None
    beside = ", ".join(f"{v.name} {statistics.median(latencies[v.name]):.3f} s"
                       for v in others if latencies[v.name])
    return ProbeResult(
        f"{label} (median, max)", f"{median:.3f} s, {max(ours):.3f} s" + (f" ({beside})" if beside else ""),
        f"<= {target_s} s", verdict(median <= target_s),
        {"runner_s": ours, "bare_s": latencies[bare.name], "bare_median_s": bare_median,
         "others_s": {v.name: latencies[v.name] for v in others}, "errors": errors},
    )


def sustained_rate(session: Session, runner: Variant, seconds: int) -> ProbeResult:
    """Raises a paced open rate until drops appear or the workload saturates.

    Each step runs `seconds` long on the default ring buffer, many times the
    buffer's capacity, so only a reader that keeps up gets through it clean.
    """
    steps: list[dict[str, Any]] = []
    best = 0.0
    failed_at: int | None = None
    for rate in RATES_QUICK if session.quick else RATES_FULL:
        n = rate * seconds
        argv = [session.tools.program("open_heavy"), str(session.scratch), str(n), str(rate)]
        m = session.measure(runner, argv, f"rate-{rate}")
        session.log(f"sustained rate {rate:,}/s: {describe(m)}")
        if m.error or not m.own_s:
            steps.append({"asked_per_s": rate, "error": m.error})
            failed_at = rate
            break
        achieved = n / m.own_s
        clean = m.drops == 0 and bool(m.events_ok)
        steps.append({"asked_per_s": rate, "achieved_per_s": round(achieved),
                      "drops": m.drops, "events_ok": m.events_ok})
        if not clean:
            failed_at = rate
            break
        best = max(best, achieved)
        if achieved < SATURATED * rate:
            break
    value = f"{best:,.0f} opens/s, 0 drops"
    if failed_at is not None:
        value += f" (loss or error at {failed_at:,}/s)"
    return ProbeResult("sustained rate, zero drops", value, "0 drops at every rate",
                       verdict(failed_at is None), {"seconds": seconds, "steps": steps})


def peak_memory(session: Session, runner: Variant) -> ProbeResult:
    """The runner's peak RSS on open_heavy and on a run `MEMORY_SCALE` times longer.

    A run of a command that makes no events is measured too: it is the fixed
    cost (interpreter, BCC and its in-process compiler), so what the long run
    adds over it is what grows with the number of events.
    """
    workload = by_name("open_heavy")
    runs: dict[str, Measurement] = {}
    plans = {"empty": [session.tools.program("start_stamp")]}
    plans |= {f"x{scale}": workload.command(session.tools, session.scratch, session.quick, scale)
              for scale in (1, MEMORY_SCALE)}
    for label, argv in plans.items():
        runs[label] = m = session.measure(runner, argv, f"memory-{label}", rss=True)
        session.log(f"peak memory {label}: {describe(m)}, max RSS {_mib(m.max_rss_kib)} MiB, "
                    f"{_mib(m.rss_while_command_kib)} MiB while the command ran")
    details = {label: asdict(m) for label, m in runs.items()}
    peaks = {label: m.max_rss_kib or 0 for label, m in runs.items() if not m.error}
    if len(peaks) != len(runs) or not all(peaks.values()):
        return ProbeResult("peak RSS growth", "n/a", "", "ERROR", details)
    short, long = peaks["x1"], peaks[f"x{MEMORY_SCALE}"]
    growth = long / short
    capture = [runs[k].rss_while_command_kib for k in ("x1", f"x{MEMORY_SCALE}")]
    value = (f"{_mib(short)} -> {_mib(long)} MiB (x{growth:.2f} for a {MEMORY_SCALE}x run; "
             f"no events: {_mib(peaks['empty'])}; while capturing: "
             f"{' -> '.join(_mib(c) for c in capture)} MiB)")
    return ProbeResult("peak RSS growth", value, f"<= x{MEMORY_GROWTH_LIMIT:.2f}",
                       verdict(growth <= MEMORY_GROWTH_LIMIT), details)


def _mib(kib: int | None) -> str:
    return "?" if kib is None else f"{kib / 1024:.0f}"


def verdict(ok: bool) -> str:
    """PASS or FAIL."""
    return "PASS" if ok else "FAIL"
