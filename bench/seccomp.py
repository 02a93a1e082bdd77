"""What the command's seccomp filter costs a syscall-dense workload.

`python -m bench.seccomp` (root). open_heavy (N openat calls flat out) is
timed (its CPU seconds) bare and under the filter (runner/enforce/seccomp.py) with the
default rules (compat ABIs refused) and with a confining policy's rules,
in interleaved rounds; the filter is installed in a forked child right
before exec, as the runner does, with its supervisor running (no call of
the workload is refused, so it is never woken). Prints the medians and the
ratios to bare, and writes bench/results/seccomp.json. The machine may be
shared: the medians say so only as well as the load allowed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench.build import build
from bench.table import render
from runner.enforce.seccomp import Rules, machine
from runner.enforce.seccomp_notify import Guard

REPO = Path(__file__).resolve().parent.parent
OPENS = 200_000
ROUNDS = 7
VARIANTS = {"bare": None, "filter: default": Rules(), "filter: confined": Rules(confine=True)}


def timed(argv: list[str], rules: Rules | None) -> float:
    """CPU seconds (user + system) of `argv`, started under `rules`' filter (None: none).

    CPU rather than wall time: on a shared machine the wait for a core is
    not the filter's.
    """
    guard = Guard(rules, machine()) if rules is not None else None
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            if guard is not None:
                guard.handover.apply()
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    if guard is not None:
        guard.start()
    _, status, usage = os.wait4(pid, 0)
    if guard is not None:
        guard.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv[0]} failed under {rules}")
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    if os.geteuid() != 0:
        print("bench.seccomp: needs root (seccomp without no_new_privs)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-seccomp-") as work:
        tools = build(Path(work) / "bin")
        scratch = Path(work) / "scratch"
        scratch.mkdir()
        argv = [tools.program("open_heavy"), str(scratch), str(OPENS)]
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(ROUNDS):
            for name, rules in VARIANTS.items():
                times[name].append(timed(argv, rules))
    bare = statistics.median(times["bare"])
    rows = [[name, f"{statistics.median(t) * 1000:.1f} ms", f"{statistics.median(t) / bare:.3f}"]
            for name, t in times.items()]
    print(render(["open_heavy, 200k openat", "median CPU (user+sys)", "ratio to bare"], rows))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    out = REPO / "bench" / "results" / "seccomp.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"opens": OPENS, "rounds": ROUNDS, "seconds": times}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
