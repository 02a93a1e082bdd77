"""`python bench/normalize_speed.py SPOOL`: normalize and publish one spool, timed, in this process.

Prints one JSON line: kernel events, wall and CPU seconds of `normalize` and
of `publish` (sweep, validation when small, tar+gzip, fsync), the CPU seconds
of stage B alone (`finish`: what is left after the command's exit when the
runner's live pass did stage A), events per second, peak RSS. It is run as a
script file (not `-m`), so the normalizer it times is whichever tree comes
first on PYTHONPATH: that is how `bench.scaling`
compares this branch with another checkout in the same session.

`--profile FILE` writes a cProfile of the same work (docs/benchmarks.md),
`--profile-stage-b FILE` one of stage B alone;
`--pure` times the pure-Python path of a tree whose C accelerator is built.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import resource
import sys
import tempfile
import time
from pathlib import Path


def timed(spool: Path, out: Path, stage_b: cProfile.Profile | None = None) -> dict[str, float | int]:
    """Normalize `spool` and publish its archive at `out`; the numbers (`stage_b` profiles `finish`)."""
    from normalizer.build import finish, scan
    from runner.evidence.publish import publish
    from spool.format import read_spool

    c0, w0 = time.process_time(), time.perf_counter()
    complete = read_spool(spool)
    scanned = scan(complete)
    cb = time.process_time()
    run = (stage_b.runcall(finish, scanned, complete) if stage_b  # normalize() is scan() then finish()
           else finish(scanned, complete))
    c1, w1 = time.process_time(), time.perf_counter()
    publish(run, out)
    c2, w2 = time.process_time(), time.perf_counter()
    return {"events": run.kernel.count, "normalize_wall_s": w1 - w0, "normalize_cpu_s": c1 - c0,
            "stage_b_cpu_s": c1 - cb, "publish_wall_s": w2 - w1, "publish_cpu_s": c2 - c1,
            "events_per_cpu_s": run.kernel.count / max(c1 - c0, 1e-9),
            "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("spool", type=Path)
    p.add_argument("--out", type=Path, help="archive to write (default: a temp directory)")
    p.add_argument("--profile", type=Path, metavar="FILE", help="write a cProfile of the run here")
    p.add_argument("--profile-stage-b", type=Path, metavar="FILE",
                   help="write a cProfile of stage B alone (`finish`) here")
    p.add_argument("--pure", action="store_true",
                   help="run the normalizer's pure-Python path even when its C accelerator is built")
    args = p.parse_args()
    if args.pure:
        from normalizer import accel

        accel.native = None
    import logging

    import structlog  # publish logs a warning when it skips validation; keep stdout one line

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "archive.tar.gz"
        if args.profile:
            profiler = cProfile.Profile()
            result = profiler.runcall(timed, args.spool, out)
            profiler.dump_stats(args.profile)
        elif args.profile_stage_b:
            profiler = cProfile.Profile()
            result = timed(args.spool, out, profiler)
            profiler.dump_stats(args.profile_stage_b)
        else:
            result = timed(args.spool, out)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
