"""`python bench/normalize_speed.py SPOOL`: normalize and publish one spool, timed, in this process.

Prints one JSON line: kernel events, wall and CPU seconds of `normalize`
(split into stage A, the scan, and stage B, which writes the kernel layer)
and of `publish` (sweep, validation when small, tar+gzip, fsync): publish is
the share after stage B ends, the time the archive waits for once the
normalized run exists. Within it, `publish_catch_up_*` is the wait for the
kernel layer's worker (normalizer/layer_digest.py) to finish what stage B
handed it; a tree without the worker reports null. CPU seconds count every
thread (the worker's included); `normalize_thread_cpu_s` is the normalizing
thread's alone (stage A and B without the publishing work the worker does
beside them). Then events per CPU second (both ways) and peak RSS. It is
run as a script file (not `-m`), so the normalizer it times is whichever tree
comes first on PYTHONPATH: that is how `bench.scaling` compares this branch
with another checkout in the same session.

`--profile FILE` writes a cProfile of the same work (docs/benchmarks.md),
`--profile-stage-b FILE` one of stage B alone (`finish`);
`--pure` times the pure-Python path of a tree whose C pieces are built (the normalizer's
accelerator and the spool's frame reader);
`--warm` imports what publishing needs first, as the runner does before a run
(`publish.warm`: about 10 ms of imports otherwise counted in publish).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import sys
import tempfile
import time
from pathlib import Path


def timed(spool: Path, out: Path, stage_b: cProfile.Profile | None = None) -> dict[str, float | int | None]:
    """Normalize `spool` and publish its archive at `out`; the numbers (`stage_b` profiles `finish`)."""
    from normalizer.build import finish, scan
    from runner.evidence.publish import publish
    from spool.format import read_spool

    c0, w0, t0 = time.process_time(), time.perf_counter(), time.thread_time()
    whole = read_spool(spool)
    scanned = scan(whole)
    ca, wa = time.process_time(), time.perf_counter()
    run = stage_b.runcall(finish, scanned, whole) if stage_b else finish(scanned, whole)
    c1, w1, t1 = time.process_time(), time.perf_counter(), time.thread_time()
    sealed = getattr(run.kernel, "deflated", None)  # the layer's worker: not in older trees
    if sealed is not None:
        sealed()
    cs, ws = time.process_time(), time.perf_counter()
    publish(run, out)
    c2, w2 = time.process_time(), time.perf_counter()
    return {"events": run.kernel.count, "normalize_wall_s": w1 - w0, "normalize_cpu_s": c1 - c0,
            "normalize_thread_cpu_s": t1 - t0,
            "stage_a_wall_s": wa - w0, "stage_a_cpu_s": ca - c0,
            "stage_b_wall_s": w1 - wa, "stage_b_cpu_s": c1 - ca,
            "publish_wall_s": w2 - w1, "publish_cpu_s": c2 - c1,
            "publish_catch_up_wall_s": ws - w1 if sealed else None,
            "publish_catch_up_cpu_s": cs - c1 if sealed else None,
            "events_per_cpu_s": run.kernel.count / max(c1 - c0, 1e-9),
            "events_per_thread_cpu_s": run.kernel.count / max(t1 - t0, 1e-9),
            "peak_rss_kib": peak_rss_kib()}


def peak_rss_kib() -> int:
    """This process's own peak (VmHWM): spawned by bench.scaling (vfork + exec), its `ru_maxrss`
    starts at the harness's high-water mark (bench/procs.py)."""
    with open("/proc/self/status", "rb") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(b"VmHWM:"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("spool", type=Path)
    p.add_argument("--out", type=Path, help="archive to write (default: a temp directory)")
    p.add_argument("--profile", type=Path, metavar="FILE", help="write a cProfile of the run here")
    p.add_argument("--profile-stage-b", type=Path, metavar="FILE",
                   help="write a cProfile of stage B alone (`finish`) here")
    p.add_argument("--pure", action="store_true",
                   help="run the pure-Python paths even when the C accelerator and frame reader are built")
    p.add_argument("--warm", action="store_true", help="import what publishing needs before timing")
    args = p.parse_args()
    if args.warm:
        from runner.evidence.publish import warm

        warm()
    if args.pure:
        from normalizer import accel
        from spool import accel as spool_accel

        accel.native = spool_accel.native = None
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
