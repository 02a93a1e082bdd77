"""`python -m bench.kill_loss`: how much a runner killed with SIGKILL loses of its spool, and how long
its command outlives it.

Each trial runs an open-heavy loop under `assay-runner run --direct`, waits
until the command runs, lets it go on for a random 0.5-2 s, notes
CLOCK_MONOTONIC and kills the runner with SIGKILL. The partial spool left
behind is read up to its last whole frame: the gap between the kill and the
newest record it holds (records carry the kernel's `bpf_ktime_get_ns`, the
same clock) is the window whose records were lost in flight, and the
spool's own rate turns it into a record count. The loop also creates a
file about every millisecond: the newest file's change time (written by the
kernel) against CLOCK_REALTIME just before the kill is how long the command
went on, unobserved, after its runner died. Prints one line per trial and
the maxima. The runs use a cgroup parent of their own, swept at the end
(runner/capture/stale.py), so nothing is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
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
from runner.capture.owner import records_dir
from runner.capture.stale import parents, sweep
from spool.format import Batch, SpoolError, iter_frames

LOOP = """import time
open('{mark}', 'w').close()
i, due = 0, 0.0
while True:
    open('/etc/hostname').close()
    if time.monotonic() >= due:
        open('{files}/f%d' % i, 'w').close()
        i, due = i + 1, time.monotonic() + 0.001
"""
SETTLE_S = 0.5
"""How long after the runner's death the files are looked at: a command still running makes more."""


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


def trial(work: Path, env: dict[str, str], n: int) -> tuple[float, int, float, float]:
    """One kill; (ms between the kill and the newest spooled record, records spooled, records/ms,
    ms between the kill and the command's newest file)."""
    mark, files = work / f"mark-{n}", work / f"files-{n}"
    files.mkdir()
    run_id = f"kill-{n}"
    runner = subprocess.Popen(
        [sys.executable, "-m", "runner.cli.main", "run", "--direct", "--out", str(work), "--run-id", run_id,
         "--", sys.executable, "-c", LOOP.format(mark=mark, files=files)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not mark.exists():
        time.sleep(0.01)
    time.sleep(random.uniform(0.5, 2.0))
    killed, killed_real = time.monotonic_ns(), time.time_ns()
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    time.sleep(SETTLE_S)
    newest_file = max(e.stat().st_ctime_ns for e in os.scandir(files))
    records, first, last = newest_records(work / f"{run_id}.spool.partial")
    rate = records / max((last - first) / 1e6, 1e-9)
    return (killed - last) / 1e6, records, rate, (newest_file - killed_real) / 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kill_loss", description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=10)
    args = p.parse_args(argv)
    os.environ[PARENT_ENV] = f"bench-kill-{secrets.token_hex(4)}"
    env = dict(os.environ)
    worst = outlived = -float("inf")
    with tempfile.TemporaryDirectory(prefix="assay-kill-") as tmp:
        for n in range(args.trials):
            gap_ms, records, rate, after_ms = trial(Path(tmp), env, n)
            worst, outlived = max(worst, gap_ms), max(outlived, after_ms)
            print(f"trial {n}: {records} records spooled, newest {gap_ms:.1f} ms before the kill "
                  f"(~{gap_ms * rate:.0f} records at {rate:.1f} records/ms); the command's newest file "
                  f"{after_ms:.1f} ms after the kill")
        print(f"swept: {len(sweep())} cgroups and spools")
    for parent in parents():
        if parent.is_dir():
            parent.rmdir()
    with contextlib.suppress(OSError):
        records_dir(os.environ[PARENT_ENV], create=False).rmdir()
    print(f"worst: the newest spooled record was {worst:.1f} ms older than the SIGKILL; the command's "
          f"newest file was {outlived:.1f} ms after it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
