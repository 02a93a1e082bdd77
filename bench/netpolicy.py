"""Network policy in the daemon: attach per run, or link once at the parent with rules in maps?

`python -m bench.netpolicy` (root). One monitor is loaded (as the daemon's
sensor is), under a private parent cgroup, and two things are timed:

- what a run costs to start and end with each design: per-run attach is
  the run's rules written to the maps plus four `BPF_PROG_ATTACH`es to the
  run's cgroup and the cgroup's removal with the programs on it; the parent
  link is the rules written to the maps (the programs were linked once);
- what a connect() costs: UDP connects to loopback in a loop, in a cgroup
  with no program, in a run's cgroup (its rules allow loopback), and in a
  cgroup under the parent that is no run (the linked program's lookup
  misses): the price every other process under the parent pays.

Prints one table and writes bench/results/netpolicy.json. The machine may
be shared: the medians say so only as well as the load allowed.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.table import render
from ebpf.monitor import AF_INET, Monitor, MonitorConfig, NetPolicySpec, NetRuleSpec
from runner.capture.cgroup import RunCgroup

REPO = Path(__file__).resolve().parent.parent
RUNS = 40
CONNECTS = 20_000
POLICY = NetPolicySpec(rules=(NetRuleSpec(AF_INET, socket.inet_aton("127.0.0.0"), 8, 1, 65535, 0),),
                       default_allow=False)
CONNECTER = """
import os, socket, sys, time
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = int(sys.argv[2])
t = time.thread_time_ns()
for _ in range(n):
    s.connect(("127.0.0.1", 9))
print((time.thread_time_ns() - t) / n)
"""


def connect_ns(cgroup: Path, n: int = CONNECTS) -> float:
    """Mean CPU ns per UDP connect() of a process in `cgroup` (CPU time: steadier on a shared machine)."""
    done = subprocess.run([sys.executable, "-c", CONNECTER, str(cgroup), str(n)],
                          capture_output=True, text=True, check=True, timeout=300)
    return float(done.stdout)


def child(parent: Path, name: str) -> RunCgroup:
    """A run cgroup under the private parent (one level below it)."""
    path = parent / f"{name}-{os.getpid()}"
    path.mkdir()
    return RunCgroup(path=path, id=path.stat().st_ino, level=0)  # the level is the monitor's run_level


def main() -> int:
    if os.geteuid() != 0:
        print("bench.netpolicy: needs root (BPF, cgroups)", file=sys.stderr)
        return 2
    parent = RunCgroup.parent_path() / f"bench-netpolicy-{os.getpid()}"
    parent.mkdir(parents=True)
    level = len(parent.relative_to(RunCgroup.parent_path().parent).parts) + 1
    monitor = Monitor(MonitorConfig(ringbuf_pages=64, run_level=level), lambda _r: None)
    try:
        attach_s, map_s = [], []
        for i in range(RUNS):  # per-run attach: rules, four attaches, removal with programs on
            cg = child(parent, f"attach-{i}")
            t = time.perf_counter()
            monitor.add_run(1, cg.id, POLICY)
            monitor.attach_net(cg.path)
            cg.path.rmdir()
            monitor.remove_run(1)
            attach_s.append(time.perf_counter() - t)
        monitor.attach_net(parent, link=True)
        for i in range(RUNS):  # parent link: rules only
            cg = child(parent, f"map-{i}")
            t = time.perf_counter()
            monitor.add_run(1, cg.id, POLICY)
            cg.path.rmdir()
            monitor.remove_run(1)
            map_s.append(time.perf_counter() - t)
        bare_cg = RunCgroup.parent_path().parent / f"bench-netpolicy-bare-{os.getpid()}"
        bare_cg.mkdir()
        run_cg, other_cg = child(parent, "run"), child(parent, "other")
        monitor.add_run(1, run_cg.id, POLICY)
        rounds: dict[str, list[float]] = {"no program": [], "run (rules allow)": [], "not a run (miss)": []}
        for _ in range(7):  # interleaved, medians
            rounds["no program"].append(connect_ns(bare_cg))
            rounds["run (rules allow)"].append(connect_ns(run_cg.path))
            rounds["not a run (miss)"].append(connect_ns(other_cg.path))
        for path in (run_cg.path, other_cg.path, bare_cg):
            path.rmdir()
    finally:
        monitor.close()
        parent.rmdir()
    per_run = {"attach per run": statistics.median(attach_s), "parent link + map": statistics.median(map_s)}
    connects = {k: statistics.median(v) for k, v in rounds.items()}
    print(render(["per run (start + end)", "median ms"],
                 [[k, f"{v * 1000:.3f}"] for k, v in per_run.items()]))
    print()
    print(render(["connect() in", "median CPU ns"], [[k, f"{v:.0f}"] for k, v in connects.items()]))
    out = REPO / "bench" / "results" / "netpolicy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": RUNS, "connects": CONNECTS, "load_average": os.getloadavg()[0],
                               "per_run_s": {"attach": attach_s, "map": map_s},
                               "connect_ns": rounds}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
