"""`python -m bench.scaling`: archive-ready time and peak RSS against run length.

For open_heavy at 50k, 200k and 800k opens (a tenth with `--quick`), each
repetition runs `assay-runner run` on `sh -c 'open_heavy DIR N && exec
start_stamp'` under GNU time. start_stamp prints CLOCK_REALTIME as the
command's last act, so **ready after exit** is the realtime at which the
runner process has returned (archive renamed into place, spool published)
minus that stamp: the final drain, trailer, detach, normalization, sweep,
compression and fsync, what a user waits for once the command is done.
**Peak RSS** is GNU time's `%M` for the whole runner. Each run is checked:
zero drops and exactly N marked opens in `layers/kernel.ndjson`.

Then the spool of each size is normalized offline by `bench/normalize_speed.py`
(this tree, and with `--baseline DIR` also another checkout, interleaved), for
events per CPU second of `normalize` alone. Medians of `--reps` rounds.
Needs root. Results also go to bench/results/scaling.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.build import Tools, root_tools
from bench.capture import read_runner_archive
from bench.procs import GNU_TIME, run_measured
from bench.report import REPORT_PREFIX, check_events, parse_report
from bench.run import REPO, _default_runner
from bench.table import render

SIZES = (50_000, 200_000, 800_000)
SPEED = Path(__file__).resolve().parent / "normalize_speed.py"
THIS = "this"


@dataclass
class RunSample:
    """One `assay-runner run` of open_heavy at one size."""

    size: int
    runner: str = THIS
    ready_after_exit_s: float | None = None
    peak_rss_mib: float | None = None
    own_s: float | None = None
    cpu_s: float | None = None
    """User+system CPU seconds of the whole invocation (runner, its live process, the command)."""
    drops: int | None = None
    events_ok: bool | None = None
    after_exit: dict[str, object] = field(default_factory=dict)
    """The runner's own `run.after_exit` log: which pass normalized, and each step's seconds."""
    error: str | None = None


@dataclass
class SizeResult:
    """Medians for one size, and the offline normalize speed of its spool per tree."""

    size: int
    runs: list[RunSample] = field(default_factory=list)
    speed: dict[str, list[dict[str, float]]] = field(default_factory=dict)


def run_once(args: argparse.Namespace, tools: Tools, size: int, rep: int,
             runner: tuple[str, str], env: dict[str, str] | None = None) -> tuple[RunSample, Path]:
    """One run at `size` by `runner` (column name, executable), with `env` added to the
    environment; its sample and its spool."""
    name, binary = runner
    out = args.work / "scaling" / name / f"{size}-{rep}"
    subprocess.run(["rm", "-rf", str(out), str(args.scratch)], check=True)
    out.mkdir(parents=True)
    args.scratch.mkdir(parents=True)
    os.sync()
    run_id = f"scale-{size}-{rep}"
    script = '"$0" "$1" "$2" && exec "$3"'
    with tempfile.NamedTemporaryFile("r") as rss:
        done = run_measured([GNU_TIME, "-f", "%M", "-o", rss.name, binary, "run", "--direct",
                             "--out", str(out), "--run-id", run_id, "--force", "--", "sh", "-c", script,
                             tools.program("open_heavy"), str(args.scratch), str(size),
                             tools.program("start_stamp")], env={**runner_env(), **(env or {})})
        ready_ns = done.start_ns + int(done.wall_s * 1e9)
        rss_text = rss.read().strip().splitlines()
    sample = RunSample(size, name)
    if failure := done.failure():
        sample.error = failure
        return sample, out / f"{run_id}.spool"
    lines = [line for line in done.stdout.splitlines() if line.startswith(REPORT_PREFIX)]
    workload, stamp = parse_report(lines[0]), parse_report(lines[-1])
    sample.ready_after_exit_s = (ready_ns - int(stamp.extra["realtime_ns"])) / 1e9
    sample.peak_rss_mib = int(rss_text[-1]) / 1024 if rss_text else None
    sample.own_s = workload.elapsed_s
    sample.cpu_s = done.cpu_s
    capture = read_runner_archive(out / f"{run_id}.tar.gz")
    sample.drops = capture.drops
    sample.events_ok = all(c.ok for c in check_events(workload.expect, capture.records))
    sample.after_exit = after_exit_log(done.stderr)
    return sample, out / f"{run_id}.spool"


def after_exit_log(stderr: str) -> dict[str, object]:
    """The runner's `run.after_exit` log line (runner/capture/session.py), {} when it has none."""
    for line in stderr.splitlines():
        if '"run.after_exit"' in line:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                return {k: v for k, v in entry.items()
                        if k not in ("event", "level", "timestamp", "component")}
    return {}


def runner_env() -> dict[str, str]:
    """The environment without PYTHONDONTWRITEBYTECODE: an installed runner has its bytecode
    compiled, and the modules it imports after the command exits (publish, validation) would
    otherwise be compiled from source on every run, charged to the time after exit."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def speed(spool: Path, tree: Path | None) -> dict[str, float]:
    """normalize_speed.py's numbers for `spool`, with `tree` first on PYTHONPATH when given."""
    env = runner_env()
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    done = subprocess.run([sys.executable, str(SPEED), str(spool)], capture_output=True, text=True,
                          env=env, cwd=tree or REPO, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def table(results: list[SizeResult], runners: list[str], trees: list[str]) -> str:
    """Per size and runner: ready after exit, peak RSS, checks; events/CPU-s of normalize and the CPU
    seconds of its stage B (`finish`) per tree (on this runner's spools)."""
    headers = ["events", "runner", "ready after exit s (median, max)", "peak RSS MiB (median)", "drops",
               "all events", *(f"normalize ev/cpu-s ({t})" for t in trees),
               *(f"stage B cpu-s ({t})" for t in trees)]
    rows = []
    for r in results:
        for name in runners:
            runs = [s for s in r.runs if s.runner == name]
            ready = [s.ready_after_exit_s for s in runs if s.ready_after_exit_s is not None]
            rss = _median([s.peak_rss_mib for s in runs])
            ok = [s.events_ok for s in runs]
            rows.append([
                f"{r.size:,}", name,
                f"{statistics.median(ready):.3f}, {max(ready):.3f}" if ready else "n/a",
                f"{rss:.0f}" if rss is not None else "n/a",
                str(sum(s.drops or 0 for s in runs)),
                "yes" if ok and all(ok) else "NO",
                *(f"{_median([x['events_per_cpu_s'] for x in r.speed.get(t, [])]) or 0:,.0f}"
                  if name == THIS else "" for t in trees),
                *(f"{_median([x.get('stage_b_cpu_s') for x in r.speed.get(t, [])]) or 0:.3f}"
                  if name == THIS else "" for t in trees),
            ])
    return render(headers, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--runner", default=_default_runner())
    p.add_argument("--work", type=Path, default=Path("/tmp/assay-bench"))
    p.add_argument("--scratch", type=Path, default=Path("/tmp/assay-bench/scratch"))
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="another checkout whose normalizer to time on the same spools, interleaved")
    p.add_argument("--baseline-runner", action="append", metavar="NAME=PATH", default=[],
                   help="also run this other assay-runner at every size, interleaved with this one "
                        "(e.g. main=/work/main/.venv/bin/assay-runner); repeatable")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results" / "scaling.json")
    args = p.parse_args(argv)
    tools = root_tools(args.work)
    if tools is None:
        return 2
    trees = {THIS: None, **({"baseline": args.baseline} if args.baseline else {})}
    runners = [(THIS, args.runner), *((name or "baseline", path) for name, _, path
                                      in (item.rpartition("=") for item in args.baseline_runner))]
    results = []
    for size in (n // 10 if args.quick else n for n in SIZES):
        result = SizeResult(size)
        for rep in range(args.reps):
            k = rep % len(runners)
            for runner in [*runners[k:], *runners[:k]]:  # rotated: none always runs first
                sample, spool = run_once(args, tools, size, rep, runner)
                result.runs.append(sample)
                print(f"scaling {size} rep {rep + 1}: {sample}", file=sys.stderr, flush=True)
                if sample.error is None and runner[0] == THIS:
                    for name, tree in (list(trees.items()) if rep % 2 == 0 else list(trees.items())[::-1]):
                        result.speed.setdefault(name, []).append(speed(spool, tree))
        results.append(result)
    print(table(results, [name for name, _ in runners], list(trees)))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
