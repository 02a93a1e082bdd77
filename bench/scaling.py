"""`python -m bench.scaling`: archive-ready time and peak RSS against run length.

For open_heavy at 50k, 200k and 800k opens (`--sizes`; a tenth with
`--quick`), each repetition runs `assay-runner run` on `sh -c 'open_heavy
DIR N 0 M && exec start_stamp'` under GNU time, once with every missing name
distinct (`distinct`: a third of N distinct paths, the worst case for
memory that holds a run's distinct values) and once with 1,000 missing
names repeated (`repeated`), so the table shows whether memory follows the
event count or the distinct paths. start_stamp prints CLOCK_REALTIME as the
command's last act, so **ready after exit** is the realtime at which the
runner process has returned (archive renamed into place, spool published)
minus that stamp. **Peak RSS** is per process, from the kernel's taskstats
exit records (bench/taskstats.py): the runner's own, its live normalizer
process's, and GNU time's `%M` (the largest of them). Each run is checked:
zero drops and exactly N marked opens in `layers/kernel.ndjson`. `--daemon`
then runs every size through each runner's daemon too (its run worker's peak).

Then the spool of each size is normalized offline by `bench/normalize_speed.py`
(this tree, and with `--baseline DIR` also another checkout, interleaved), for
events per second of `normalize` alone and its peak RSS. Medians of `--reps`
rounds; a least-squares line and RSS spreads over the sizes say how linear
and how flat (bench/scaling_tables.py). Needs root. Results also go to
bench/results/scaling.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.build import Tools, root_tools
from bench.capture import read_runner_archive
from bench.daemon import DaemonService
from bench.procs import GNU_TIME, run_measured
from bench.report import REPORT_PREFIX, check_events, parse_report
from bench.run import REPO, _default_runner
from bench.scaling_fit import after_exit_log, daemon_worker, mib, roles
from bench.scaling_tables import THIS, tables
from bench.taskstats import ExitListener, ProcessPeak, TaskstatsError

SIZES = (50_000, 200_000, 800_000)
PATHS = {"distinct": 0, "repeated": 1000}
"""open_heavy's MISSING argument per paths variant: 0 makes every missing name differ."""
SPEED = Path(__file__).resolve().parent / "normalize_speed.py"
WORKER_WAIT_S = 10.0
DAEMON = "daemon"
"""The suffix of a runner's name in its daemon-mode rows."""


@dataclass
class RunSample:
    """One `assay-runner run` of open_heavy at one size."""

    size: int
    paths: str = "distinct"
    runner: str = THIS
    ready_after_exit_s: float | None = None
    largest_rss_mib: float | None = None
    """GNU time's %M: the largest `ru_maxrss` among the runner and the children it waited for
    (direct mode only: in daemon mode it would be the client's)."""
    runner_rss_mib: float | None = None
    """The runner process's own peak (taskstats at its exit); in daemon mode the run's worker's."""
    live_rss_mib: float | None = None
    """The live normalizer process's own peak (taskstats); None when there was none."""
    live_rss_log_mib: float | None = None
    """The same peak as the runner logged it (`run.after_exit`'s live_peak_rss_mib)."""
    own_s: float | None = None
    cpu_s: float | None = None
    """User+system CPU seconds of the whole invocation (runner, its live process, the command)."""
    drops: int | None = None
    events_ok: bool | None = None
    after_exit: dict[str, object] = field(default_factory=dict)
    """The runner's own `run.after_exit` log: which pass normalized, and each step's seconds."""
    daemon_hwm_mib: dict[str, float | None] = field(default_factory=dict)
    """Daemon mode: the daemon's and its sensor's VmHWM after the run (both live on across runs)."""
    processes: list[dict[str, object]] = field(default_factory=list)
    """Every exited process under GNU time: tgid, ppid, comm, peak_rss_kib, cpu_s."""
    error: str | None = None


@dataclass
class SizeResult:
    """The runs at one size and paths variant, and the offline normalize figures of its spools per tree."""

    size: int
    paths: str = "distinct"
    runs: list[RunSample] = field(default_factory=list)
    speed: dict[str, list[dict[str, float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Subject:
    """A runner as the tables name it: its executable, the daemon it runs through (None: direct) and
    the variables added to its environment (bench.under_load's variants)."""

    name: str
    binary: str
    daemon: DaemonService | None = None
    env: dict[str, str] = field(default_factory=dict)

    def mode(self) -> list[str]:
        """`run`'s mode options."""
        return ["--daemon", "--socket", str(self.daemon.socket)] if self.daemon else ["--direct"]


def run_once(args: argparse.Namespace, tools: Tools, size: int, paths: str, rep: int,
             runner: Subject, exits: ExitListener | None) -> tuple[RunSample, Path]:
    """One run at `size` with `paths` by `runner`; its sample and its spool."""
    name, binary = runner.name, runner.binary
    out = args.work / "scaling" / name.replace(" ", "-") / f"{paths}-{size}-{rep}"
    subprocess.run(["rm", "-rf", str(out), str(args.scratch)], check=True)
    out.mkdir(parents=True)
    args.scratch.mkdir(parents=True)
    os.sync()
    run_id = f"scale-{paths}-{size}-{rep}"
    script = '"$0" "$1" "$2" 0 "$3" && exec "$4"'
    if exits is not None:
        exits.forget()
    with tempfile.NamedTemporaryFile("r") as rss:
        # direct runs log their after-exit figures as JSON (the daemon's client logs nothing: its figures
        # are the daemon's); a leading option would send the fast client to the Python one
        logs = [] if runner.daemon else ["--log-format", "json"]
        done = run_measured([GNU_TIME, "-f", "%M", "-o", rss.name, binary, *logs, "run", *runner.mode(),
                             "--out", str(out), "--run-id", run_id, "--force", "--", "sh", "-c", script,
                             tools.program("open_heavy"), str(args.scratch), str(size), str(PATHS[paths]),
                             tools.program("start_stamp")], env={**runner_env(), **runner.env})
        ready_ns = done.start_ns + int(done.wall_s * 1e9)
        rss_text = rss.read().strip().splitlines()
    sample = RunSample(size, paths, name)
    if failure := done.failure():
        sample.error = failure
        return sample, out / f"{run_id}.spool"
    lines = [line for line in done.stdout.splitlines() if line.startswith(REPORT_PREFIX)]
    workload, stamp = parse_report(lines[0]), parse_report(lines[-1])
    sample.ready_after_exit_s = (ready_ns - int(stamp.extra["realtime_ns"])) / 1e9
    if runner.daemon is None:  # else it is only the client's
        sample.largest_rss_mib = int(rss_text[-1]) / 1024 if rss_text else None
    sample.own_s = workload.elapsed_s
    sample.cpu_s = done.cpu_s
    capture = read_runner_archive(out / f"{run_id}.tar.gz")
    sample.drops = capture.drops
    sample.events_ok = all(c.ok for c in check_events(workload.expect, capture.records))
    sample.after_exit = after_exit_log(done.stderr)
    logged = sample.after_exit.get("live_peak_rss_mib")
    sample.live_rss_log_mib = float(logged) if isinstance(logged, int | float) else None
    if exits is not None and done.pid is not None:
        try:
            if runner.daemon is None:
                peaks = exits.peaks_under(done.pid)
                who = roles(peaks, done.pid)
                sample.runner_rss_mib = mib(who.runner.peak_rss_kib) if who.runner else None
                sample.live_rss_mib = mib(who.live.peak_rss_kib) if who.live else None
            else:
                peaks, worker = _daemon_worker(exits, runner.daemon)
                sample.runner_rss_mib = mib(worker.peak_rss_kib) if worker else None
                sample.daemon_hwm_mib = {k: mib(v) for k, v in runner.daemon.peaks_kib().items()}
            sample.processes = [asdict(p) for p in sorted(peaks.values(), key=lambda p: p.tgid)]
        except TaskstatsError as exc:
            print(f"bench.scaling: {exc}: no per-process peaks for this run", file=sys.stderr)
    return sample, out / f"{run_id}.spool"


def _daemon_worker(exits: ExitListener, service: DaemonService) -> tuple[dict[int, ProcessPeak],
                                                                         ProcessPeak | None]:
    """The exited processes under the daemon and its run's worker, waited for: the client may
    return (archive delivered) a little before the worker has exited."""
    deadline = time.monotonic() + WORKER_WAIT_S
    while True:
        peaks = exits.peaks_under(service.pid)
        worker = daemon_worker(peaks, service.pid, service.sensor_pid())
        if worker is not None or time.monotonic() > deadline:
            return peaks, worker
        time.sleep(0.02)


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


def sizes(text: str) -> list[int]:
    """`--sizes`: comma-separated positive event counts."""
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes takes comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"--sizes takes positive integers, got {text!r}")
    return values


def path_variants(text: str) -> list[str]:
    """`--paths`: comma-separated names from PATHS."""
    chosen = [v.strip() for v in text.split(",") if v.strip()]
    if not chosen or set(chosen) - set(PATHS):
        raise argparse.ArgumentTypeError(f"--paths takes {', '.join(PATHS)} (comma-separated), got {text!r}")
    return chosen


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sizes", type=sizes, default=list(SIZES), metavar="N,N,...",
                   help="open_heavy sizes (default 50000,200000,800000; add 3200000 to see further)")
    p.add_argument("--paths", type=path_variants, default=list(PATHS), metavar="distinct,repeated",
                   help="distinct: every missing name differs; repeated: 1,000 missing names (default both)")
    p.add_argument("--runner", default=_default_runner())
    p.add_argument("--work", type=Path, default=Path("/tmp/assay-bench"))
    p.add_argument("--scratch", type=Path, default=Path("/tmp/assay-bench/scratch"))
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="another checkout whose normalizer to time on the same spools, interleaved")
    p.add_argument("--baseline-runner", action="append", metavar="NAME=PATH", default=[],
                   help="also run this other assay-runner at every size, interleaved with this one "
                        "(e.g. main=/work/main/.venv/bin/assay-runner); repeatable")
    p.add_argument("--daemon", action="store_true",
                   help="also run every size through 'assay-runner daemon' of each runner, after the "
                        "direct runs, one daemon at a time (its worker's peak RSS in the runner column)")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results" / "scaling.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tools = root_tools(args.work)
    if tools is None:
        return 2
    trees = {THIS: None, **({"baseline": args.baseline} if args.baseline else {})}
    runners = [Subject(THIS, args.runner), *(Subject(name or "baseline", path) for name, _, path
                                             in (item.rpartition("=") for item in args.baseline_runner))]
    try:
        listener: ExitListener | None = ExitListener()
    except (TaskstatsError, OSError) as exc:
        print(f"bench.scaling: no per-process peaks (taskstats: {exc}); GNU time's %M only", file=sys.stderr)
        listener = None
    results = {(n // 10 if args.quick else n, paths): SizeResult(n // 10 if args.quick else n, paths)
               for n in args.sizes for paths in args.paths}
    names = [r.name for r in runners]
    with listener or contextlib.nullcontext():
        for result in results.values():
            for rep in range(args.reps):
                k = rep % len(runners)
                for runner in [*runners[k:], *runners[:k]]:  # rotated: none always runs first
                    spool = measure(args, tools, result, rep, runner, listener)
                    if spool is not None and runner.name == THIS:
                        order = list(trees.items()) if rep % 2 == 0 else list(trees.items())[::-1]
                        for name, tree in order:
                            result.speed.setdefault(name, []).append(speed(spool, tree))
        if args.daemon:  # one daemon at a time: another's sensor would see every syscall too
            for runner in runners:
                socket = args.work / "scaling-daemon" / runner.name / "runner.sock"
                with DaemonService(runner.binary, socket, socket.with_name("daemon.log")) as service:
                    subject = Subject(f"{runner.name} {DAEMON}", runner.binary, service)
                    names.append(subject.name)
                    for result in results.values():
                        for rep in range(args.reps):
                            measure(args, tools, result, rep, subject, listener)
    print(tables(list(results.values()), names, list(trees)))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps([asdict(r) for r in results.values()], indent=1) + "\n")
    return 0


def measure(args: argparse.Namespace, tools: Tools, result: SizeResult, rep: int, runner: Subject,
            exits: ExitListener | None) -> Path | None:
    """One run into `result`, with a progress line; its spool when it succeeded."""
    sample, spool = run_once(args, tools, result.size, result.paths, rep, runner, exits)
    result.runs.append(sample)
    print(f"scaling {result.paths} {result.size} rep {rep + 1}: {sample.runner} ready "
          f"{sample.ready_after_exit_s} s, runner {sample.runner_rss_mib} MiB, live "
          f"{sample.live_rss_mib} MiB, error {sample.error}", file=sys.stderr, flush=True)
    return spool if sample.error is None else None


if __name__ == "__main__":
    sys.exit(main())
