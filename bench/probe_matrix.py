"""`python -m bench.probe_matrix`: wall time of `probe --matrix` over the full catalog.

The matrix (every probe x baseline and the three runner presets) is
meant to finish under 60 s on our 2-core machines. This runs it REPS
times in fresh workspaces, exactly as a user would (`probe --matrix`), and
reports each run's wall time, the CPU time of everything it started (user +
system: the figure that does not depend on how busy a shared machine is)
and the per-mode times the harness prints.
No peer is configured, so `net_outbound_tcp` records `error` and contacts
nothing. Needs root (runner modes). Numbers go to stdout and to
bench/results/probe-matrix.json; the load average is recorded because the
machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / ".venv" / "bin" / "probe"
MODE_LINE = re.compile(r"^probe: mode (\S+): (\d+) probes in ([0-9.]+) s$")


def one_run(work: Path, jobs: int | None) -> dict:
    """One `probe --matrix` in a fresh workspace: wall time, per-mode times, record count."""
    ws, home = work / "ws", work / "home"
    (home / ".ssh").mkdir(parents=True)
    ws.mkdir()
    env = {**os.environ, "HOME": str(home)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    jobs_flag = ["--jobs", str(jobs)] if jobs else []
    done = subprocess.run(
        [PROBE, "--matrix", "--workspace", ws, "--out", work / "out", *jobs_flag],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    modes = {m[1]: float(m[3]) for m in map(MODE_LINE.match, done.stderr.splitlines()) if m}
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "modes_s": modes,
        "records": len(done.stdout.splitlines()),
        "exit": done.returncode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--jobs", type=int, help="passed to probe --matrix (default: its own, all modes at once)"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.probe_matrix: needs root (the runner modes)", file=sys.stderr)
        return 2
    runs = []
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
            load = os.getloadavg()[0]
            run = {**one_run(Path(tmp), args.jobs), "load_1m_before": round(load, 2)}
        runs.append(run)
        modes = "  ".join(f"{k} {v:.1f}" for k, v in run["modes_s"].items())
        print(
            f"rep {rep + 1}: {run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} s cpu, {run['records']} records, "
            f"exit {run['exit']}, "
            f"load {run['load_1m_before']}  [{modes}]"
        )
    median = statistics.median(r["wall_s"] for r in runs)
    cpu = statistics.median(r["cpu_s"] for r in runs)
    print(
        f"median wall: {median:.1f} s, median cpu: {cpu:.1f} s, over {len(runs)} runs (target: wall < 60 s)"
    )
    out = REPO / "bench" / "results" / "probe-matrix.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "jobs": args.jobs,
                "runs": runs,
                "median_wall_s": median,
                "median_cpu_s": cpu,
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
        + "\n"
    )
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
