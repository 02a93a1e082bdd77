"""The normalizer's optional C accelerator, `normalizer._fastscan` (normalizer/fastscan.c).

`make setup` builds it with the machine's gcc (scripts/setup.sh). It holds
C versions of the hot loops: the scan's fast path (`scan.fast_records`),
the kernel-line splicers (`kernel_lines.join_lines`, `join_indexed`), the
tails of distinct shapes (`kernel_lines.shape_tails`), the spill's shape
table (`buckets.index_shapes`), the tail memo's lookups
(`collector.unseen_shapes`, `collector.tails_of`), the surface's value
gathering (`collector.collect_values`), the secret sweep's and the
redaction prefilter's block test (`redact.any_folded`); the spool
reader's walk over whole frames is the spool's own (spool/accel.py). The Python functions are
the fallback when it is not built and the reference it is tested against:
both give the same bytes on every recorded spool and on generated records
(tests/test_normspeed.py). `native` is None when it is not there, and when it is
older than its source beside it (spool/native.py); `refused` then says why.
Tests and `bench/normalize_speed.py --pure` set it to None to run the Python path.
"""

from __future__ import annotations

from pathlib import Path

from spool.native import load

SOURCE = Path(__file__).with_name("fastscan.c")
native, refused = load("normalizer._fastscan", SOURCE)
