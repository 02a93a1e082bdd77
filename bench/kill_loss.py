"""`python -m bench.kill_loss`: how much a runner killed with SIGKILL loses of its spool.

Each trial runs an open-heavy loop under `assay-runner run --direct`, waits
until the command runs, lets it go on for a random 0.5-2 s, notes
CLOCK_MONOTONIC and kills the runner with SIGKILL. The partial spool left
behind is read up to its last whole frame: the gap between the kill and the
newest record it holds (records carry the kernel's `bpf_ktime_get_ns`, the
same clock) is the window whose records were lost in flight, and the
spool's own rate turns it into a record count. Prints one line per trial
and the maximum. The runs use a cgroup parent of their own, swept at the
end (runner/capture/stale.py), so nothing is left behind.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ebpf.wire import HEADER
from runner.capture.cgroup import PARENT_ENV
from runner.capture.stale import parents, sweep
from spool.format import Batch, SpoolError, iter_frames

LOOP = "import time\nopen('{mark}', 'w').close()\nwhile True:\n    open('/etc/hostname').close()\n"


def newest_records(partial: Path) -> tuple[int, int, int]:
    """(records, first ts, last ts) of the whole frames in a partial spool."""
    stamps: list[int] = []
    with partial.open("rb") as f:
        try:
            for frame in iter_frames(f):
                if isinstance(frame, Batch):
                    stamps += [HEADER.unpack_from(r)[0] for r in frame.records]
        except SpoolError:
            pass  # a torn last frame: what a killed runner may leave
    return len(stamps), min(stamps), max(stamps)


def trial(work: Path, env: dict[str, str], n: int) -> tuple[float, int, float]:
    """One kill; (ms between the kill and the newest spooled record, records spooled, records/ms)."""
    mark = work / f"mark-{n}"
    run_id = f"kill-{n}"
    runner = subprocess.Popen(
        [sys.executable, "-m", "runner.cli.main", "run", "--direct", "--out", str(work), "--run-id", run_id,
         "--", sys.executable, "-c", LOOP.format(mark=mark)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not mark.exists():
        time.sleep(0.01)
    time.sleep(random.uniform(0.5, 2.0))
    killed = time.monotonic_ns()
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    records, first, last = newest_records(work / f"{run_id}.spool.partial")
    rate = records / max((last - first) / 1e6, 1e-9)
    return (killed - last) / 1e6, records, rate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kill_loss", description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=10)
    args = p.parse_args(argv)
    os.environ[PARENT_ENV] = f"bench-kill-{secrets.token_hex(4)}"
    env = dict(os.environ)
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="assay-kill-") as tmp:
        for n in range(args.trials):
            gap_ms, records, rate = trial(Path(tmp), env, n)
            worst = max(worst, gap_ms)
            print(f"trial {n}: {records} records spooled, newest {gap_ms:.1f} ms before the kill "
                  f"(~{gap_ms * rate:.0f} records at {rate:.1f} records/ms)")
        print(f"swept: {len(sweep())} cgroups and spools")
    for parent in parents():
        if parent.is_dir():
            parent.rmdir()
    print(f"worst: the newest spooled record was {worst:.1f} ms older than the SIGKILL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
