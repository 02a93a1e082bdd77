"""`python -m bench.under_load`: drops and archive-ready time of direct runs on a loaded machine.

The live normalizer once ran on a thread of the direct runner, beside the
drain loop; on a loaded machine, niced and preempted while it held the GIL,
it stalled that loop and the ring overflowed (docs/benchmarks.md). This
bench loads the machine with `--hogs` busy processes (`yes >/dev/null`, at
the runner's priority, for the whole bench) and runs open_heavy at
`--size` opens under each variant, interleaved (rotated per round, as
bench.scaling): `this` (this tree's runner as it is), and every `--variant
NAME=PATH[,KEY=VALUE...]` (another runner, with environment variables: e.g.
main with `ASSAY_RUNNER_LIVE_NORMALIZE=1`, its in-thread pass in direct
mode). Each run is checked as bench.scaling checks it (drops, every marked
open in the kernel layer) and reports the time after exit, the command's
own time and the CPU seconds of the whole invocation. Needs root. Results
also go to bench/results/under_load.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench.build import root_tools
from bench.run import REPO, _default_runner
from bench.scaling import THIS, RunSample, Subject, run_once
from bench.table import render


def parse_variant(text: str) -> tuple[str, str, dict[str, str]]:
    """`NAME=PATH[,KEY=VALUE...]` as (name, path, env)."""
    head, *pairs = text.split(",")
    name, _, path = head.partition("=")
    if not name or not path or any("=" not in p for p in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=PATH[,KEY=VALUE...]")
    return name, path, dict(p.split("=", 1) for p in pairs)


def table(samples: list[RunSample], names: list[str]) -> str:
    """Per variant: runs, drops (per run), all events, after exit, command's own s, CPU s."""
    headers = ["variant", "runs", "drops per run", "all events", "ready after exit s (median, max)",
               "command's own s (median)", "CPU s (median)", "normalized_by"]
    rows = []
    for name in names:
        runs = [s for s in samples if s.runner == name and s.error is None]
        ready = [s.ready_after_exit_s for s in runs if s.ready_after_exit_s is not None]
        rows.append([
            name, str(len(runs)), " ".join(str(s.drops) for s in runs),
            "yes" if runs and all(s.events_ok for s in runs) else "NO",
            f"{statistics.median(ready):.3f}, {max(ready):.3f}" if ready else "n/a",
            f"{statistics.median(s.own_s for s in runs if s.own_s is not None):.3f}" if runs else "n/a",
            f"{statistics.median(s.cpu_s for s in runs if s.cpu_s is not None):.2f}" if runs else "n/a",
            " ".join(sorted({str(s.after_exit.get('normalized_by')) for s in runs})),
        ])
    return render(headers, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.under_load", description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--size", type=int, default=200_000, help="open_heavy's opens per run")
    p.add_argument("--hogs", type=int, default=2, help="busy processes for the whole bench")
    p.add_argument("--runner", default=_default_runner())
    p.add_argument("--variant", action="append", type=parse_variant, default=[],
                   metavar="NAME=PATH[,KEY=VALUE...]", help="another runner (and environment); repeatable")
    p.add_argument("--work", type=Path, default=Path("/tmp/assay-bench"))
    p.add_argument("--scratch", type=Path, default=Path("/tmp/assay-bench/scratch"))
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results" / "under_load.json")
    args = p.parse_args(argv)
    tools = root_tools(args.work)
    if tools is None:
        return 2
    variants = [(THIS, args.runner, {}), *args.variant]
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.hogs)]
    samples: list[RunSample] = []
    try:
        for rep in range(args.reps):
            k = rep % len(variants)
            for name, path, env in [*variants[k:], *variants[:k]]:  # rotated: none always runs first
                subject = Subject(name, path, env=env)
                sample, _ = run_once(args, tools, args.size, "distinct", rep, subject, None)
                samples.append(sample)
                print(f"under load, rep {rep + 1}: {sample}", file=sys.stderr, flush=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(table(samples, [name for name, _, _ in variants]))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps([asdict(s) for s in samples], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
