"""`python -m bench.run`: the whole benchmark suite in one session.

Builds the workloads, runs each overhead workload under every variant
(interleaved, medians), then the start-to-exec, sustained-rate and memory
probes, prints two tables and writes every number to bench/results/.
Progress goes to stderr, the tables to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import daemon, probes
from bench.build import Tools, root_tools
from bench.overhead import RUNNER, WorkloadResult, bench_workload
from bench.procs import Cgroup, Tmpfs
from bench.session import Session
from bench.suite import WORKLOADS
from bench.table import ratio, render, seconds
from bench.variants import Bare, Bpftrace, Runner, Strace, Variant

REPO = Path(__file__).resolve().parent.parent
PROBES = ("start", "rate", "memory", "daemon")
PEERS = ("strace", "bpftrace", "floor")
BUSY_LOAD = 0.5
PY_CONSUMER = "runner-py"
OFFLINE = "runner-offline"
LIVE_ENV = "ASSAY_RUNNER_LIVE_NORMALIZE"
"""runner/capture/live.py's switch: `0` normalizes the finished spool after the exit instead."""
BASELINE = "baseline"
CONSUMER_ENV = "ASSAY_RUNNER_RING_CONSUMER"
BPF_CACHE_ENV = "ASSAY_RUNNER_BPF_CACHE"
COLD = "runner-cold"
"""The runner with its compiled-object cache off (ebpf/bpfobject.py): what a first run costs."""
"""runner/capture/sources.py's switch (the bench imports nothing of the capture side)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    names = [w.name for w in WORKLOADS] + list(PROBES)
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: a tenth of the sizes, 2 repetitions, short probes")
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"run only these (repeatable or comma-separated): {', '.join(names)}")
    p.add_argument("--reps", type=int, help="repetitions per variant (default 5, quick 2)")
    p.add_argument("--runner", default=_default_runner(), help="assay-runner executable")
    p.add_argument("--work", type=Path, default=Path("/tmp/assay-bench"),
                   help="build, archive and spool directory (default /tmp/assay-bench)")
    p.add_argument("--scratch", type=Path, default=Path("/tmp/assay-bench/scratch"),
                   help="where workloads create files, emptied before every run "
                        "(default /tmp/assay-bench/scratch; not under /dev)")
    p.add_argument("--scratch-tmpfs", action="store_true",
                   help="mount a tmpfs over the scratch directory: steadier numbers, but a "
                        "cheaper bare open, so higher ratios than the targets assume")
    p.add_argument("--daemon", action="store_true",
                   help="also run every workload through 'assay-runner daemon' (the 'daemon' column); "
                        "the 'daemon' probe always does")
    p.add_argument("--py-consumer", action="store_true",
                   help="also run the runner with the per-record Python ring reader instead of the "
                        "C consumer (the 'runner-py' column): an A/B in the same rounds")
    p.add_argument("--offline-normalize", action="store_true",
                   help="also run the runner with the live normalizer off (normalize the finished spool "
                        "after the exit: the 'runner-offline' column): an A/B in the same rounds")
    p.add_argument("--baseline-runner", action="append", metavar="[NAME=]PATH",
                   help="also run this other assay-runner (e.g. a checkout of main) in the same rounds, "
                        "in a column NAME (default 'baseline'); repeatable: before/after in one session")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results" / "latest.json",
                   help="where to write the JSON results")
    args = p.parse_args(argv)
    chosen = [n.strip() for item in args.only or names for n in item.split(",") if n.strip()]
    if unknown := sorted(set(chosen) - set(names)):
        p.error(f"unknown --only name(s): {', '.join(unknown)}; choose from {', '.join(names)}")
    args.only = chosen
    args.reps = args.reps or (2 if args.quick else 5)
    return args


def _default_runner() -> str:
    beside = Path(sys.executable).parent / "assay-runner"
    return str(beside) if beside.exists() else (shutil.which("assay-runner") or "assay-runner")


def make_variants(args: argparse.Namespace, cgroup: Cgroup) -> tuple[list[Variant], dict[str, str]]:
    """Every variant that can run here, and why the others cannot."""
    candidates: list[Variant] = [
        Bare(),
        Runner(args.runner, args.work / "runs"),
        Strace(),
        Bpftrace("bpftrace", "monitor.bt", cgroup, args.work, check=True),
        Bpftrace("floor", "floor.bt", cgroup, args.work, check=False),
    ]
    for name, path in baselines(args):
        candidates.insert(2, Runner(path, args.work / f"runs-{name}", name=name))
    if args.py_consumer:
        candidates.insert(2, Runner(args.runner, args.work / "runs-py", name=PY_CONSUMER,
                                    env={CONSUMER_ENV: "python"}))
    if args.offline_normalize:
        candidates.insert(2, Runner(args.runner, args.work / "runs-offline", name=OFFLINE,
                                    env={LIVE_ENV: "0"}))
    if args.daemon:
        candidates.insert(2, daemon.DaemonRunner(args.runner, args.work / "daemon-runs", daemon_socket(args)))
    usable, skipped = [], {}
    for v in candidates:
        if why := v.unavailable():
            skipped[v.name] = why
        else:
            usable.append(v)
    return usable, skipped


def baselines(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(column, runner path) of every --baseline-runner."""
    out = []
    for item in args.baseline_runner or []:
        name, _, path = item.rpartition("=")
        out.append((name or BASELINE, path))
    return out


def overhead_table(results: list[WorkloadResult]) -> str:
    """workload, bare time, ratios, target, runner against peers, status, and each runner mode's
    whole wall (until the archive is ready) over the bare command's wall."""
    extra = {"daemon", PY_CONSUMER, *(name for r in results for name in r.medians)} - {"bare", RUNNER, *PEERS}
    modes = [RUNNER, *sorted(m for m in extra if any(m in r.medians for r in results))]
    headers = ["workload", "bare s", *modes, *PEERS, "target", "runner/strace",
               "runner/bpftrace", "status", *(f"{m} whole wall" for m in modes)]
    rows = [[r.workload, seconds(r.medians.get("bare")), *(ratio(r.ratios.get(m)) for m in modes),
             *(ratio(r.ratios.get(p)) for p in PEERS), f"<= {r.target:.2f}x",
             ratio(r.runner_vs.get("strace")), ratio(r.runner_vs.get("bpftrace")), r.status,
             *(ratio(r.wall_ratios.get(m)) for m in modes)]
            for r in results]
    return render(headers, rows)


def probe_table(results: list[probes.ProbeResult]) -> str:
    """metric, value, target, status."""
    return render(["metric", "value", "target", "status"],
                  [[p.metric, p.value, p.target, p.status] for p in results])


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    def first_line(cmd: list[str]) -> str:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError:
            return "unavailable"
        return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 \
            else "unavailable"
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "bpftrace": first_line(["bpftrace", "--version"]),
            "strace": first_line(["strace", "-V"]),
            "commit": first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])}


def main(argv: list[str] | None = None) -> int:
    """Runs the selected benchmarks; exit 0 when everything ran (pass or fail)."""
    args = parse_args(argv)
    tools = root_tools(args.work)
    if tools is None:
        return 2
    with contextlib.ExitStack() as stack:
        if args.scratch_tmpfs:
            stack.enter_context(Tmpfs(args.scratch))
        overhead, probe_results, skipped = run_session(args, tools)
    print(overhead_table(overhead) if overhead else "(no overhead workloads selected)")
    for r in overhead:
        print(f"  {r.workload}: per-round ratios, median [min-max]: " + ", ".join(
            f"{name} {m:.2f}x [{lo:.2f}-{hi:.2f}]" for name, (m, lo, hi) in sorted(r.paired.items())))
        for note in r.notes:
            print(f"  {r.workload}: {note}")
    print()
    print(probe_table(probe_results) if probe_results else "(no probes run)")
    write_results(args, overhead, probe_results, skipped)
    return 0


def run_session(args: argparse.Namespace, tools: Tools) -> tuple[
        list[WorkloadResult], list[probes.ProbeResult], dict[str, str]]:
    """Overhead workloads, then probes, in one cgroup for the bpftrace peers."""
    session = Session(tools=tools, scratch=args.scratch, quick=args.quick)
    args.load_before = os.getloadavg()[0]
    if args.load_before > BUSY_LOAD:
        session.log(f"warning: load average {args.load_before:.2f} before starting: "
                    "other work on this machine will make the ratios noisy")
    cgroup = Cgroup(f"assay-bench-{os.getpid()}")
    needs_daemon = args.daemon or "daemon" in args.only
    try:
        with daemon.DaemonService(args.runner, daemon_socket(args), args.work / "daemon.log") \
                if needs_daemon else contextlib.nullcontext() as service:
            variants, skipped = make_variants(args, cgroup)
            for name, why in skipped.items():
                session.log(f"skipping {name}: {why}")
            workloads = [w for w in WORKLOADS if w.name in args.only]
            overhead = [bench_workload(session, w, variants, args.reps, skipped) for w in workloads]
            probe_results = run_probes(session, args, variants, skipped)
            if "daemon" in args.only and service is not None:  # needs_daemon: always there
                probe_results += daemon_probes(session, args, variants, service, cgroup)
    finally:
        cgroup.remove()
    return overhead, probe_results, skipped


def run_probes(session: Session, args: argparse.Namespace, variants: list[Variant],
               skipped: dict[str, str]) -> list[probes.ProbeResult]:
    """Start-to-exec, sustained rate and memory: all need the runner."""
    chosen = [p for p in PROBES if p in args.only]
    by_name = {v.name: v for v in variants}
    runner = by_name.get(RUNNER)
    if runner is None:
        why = skipped.get(RUNNER, "runner unavailable")
        return [probes.ProbeResult(p, "n/a", "", "n/a", {"skipped": why}) for p in chosen]
    out = []
    if "start" in chosen:
        cold = Runner(args.runner, args.work / "runs-cold", name=COLD, env={BPF_CACHE_ENV: "off"})
        others = [v for v in variants if v.name in dict(baselines(args))]
        out.append(probes.start_to_exec(session, runner, by_name["bare"], args.reps, others=[*others, cold]))
    if "rate" in chosen:
        out.append(probes.sustained_rate(session, runner, seconds=1 if args.quick else 2))
    if "memory" in chosen:
        out.append(probes.peak_memory(session, runner))
    return out


def daemon_socket(args: argparse.Namespace) -> Path:
    return args.work / "daemon" / "runner.sock"


def daemon_probes(session: Session, args: argparse.Namespace, variants: list[Variant],
                  service: daemon.DaemonService, cgroup: Cgroup) -> list[probes.ProbeResult]:
    """Start-to-exec through the client, a whole /bin/true run, memory over back-to-back runs."""
    by_name = {v.name: v for v in variants}
    client = by_name.get("daemon") or daemon.DaemonRunner(args.runner, args.work / "daemon-runs",
                                                          service.socket)
    out = [probes.start_to_exec(session, client, by_name["bare"], args.reps, "daemon start-to-exec",
                                daemon.TRUE_START_TARGET_S)]
    walls = daemon.true_wall(session, args.runner, service, cgroup, args.reps)
    med = walls["medians_s"]
    ours = med.get("daemon")
    others = ", ".join(f"{name} {med[name]:.3f} s" for name in ("python client", "direct", "bpftrace", "bare")
                       if name in med)
    value = f"{ours:.3f} s ({others})" if ours else "n/a"
    out.append(probes.ProbeResult("daemon /bin/true whole wall (median)", value,
                                  f"<= {daemon.TRUE_TARGET_S} s",
                                  "ERROR" if ours is None else probes.verdict(ours <= daemon.TRUE_TARGET_S),
                                  walls))
    mem = daemon.daemon_memory(session, args.runner, service)
    growth = mem["growth"]
    out.append(probes.ProbeResult(
        f"daemon RSS over {mem['runs']} runs",
        f"{mem['rss_kib'][0] / 1024:.1f} -> {mem['rss_kib'][-1] / 1024:.1f} MiB (x{growth:.2f} after run 10; "
        f"{mem['failures']} failed runs)", f"<= x{daemon.MEMORY_GROWTH_LIMIT:.2f}",
        probes.verdict(growth is not None and growth <= daemon.MEMORY_GROWTH_LIMIT and not mem["failures"]),
        mem))
    return out


def write_results(args: argparse.Namespace, overhead: list[WorkloadResult],
                  probe_results: list[probes.ProbeResult], skipped: dict[str, str]) -> None:
    """Every measurement, median and verdict as JSON."""
    args.results.parent.mkdir(parents=True, exist_ok=True)
    doc = {"machine": machine(), "quick": args.quick, "reps": args.reps, "skipped": skipped,
           "scratch": {"path": str(args.scratch), "tmpfs": args.scratch_tmpfs},
           "load_average": {"before": args.load_before, "after": os.getloadavg()[0]},
           "workloads": [asdict(r) for r in overhead],
           "probes": [asdict(p) for p in probe_results]}
    args.results.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nresults: {args.results}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
