"""The spool reader's optional C walk over whole frames, `spool._framescan` (spool/framescan.c).

`make setup` builds it with the machine's gcc (scripts/build_native.sh). It
holds C versions of `spool.format.batch_records` and `skip_frames`, which are
the fallback when it is not built and the reference it is tested against
(tests/test_spool_reader.py). `native` is None when it is not there, and when it is
older than its source beside it (spool/native.py); `refused` then says why.
Tests and `bench/normalize_speed.py --pure` set it to None to run the Python path.
"""

from __future__ import annotations

from pathlib import Path

from spool.native import load

SOURCE = Path(__file__).with_name("framescan.c")
native, refused = load("spool._framescan", SOURCE)
