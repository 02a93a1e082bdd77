"""The spool's C frame walk (spool/framescan.c, built by scripts/build_native.sh) as the type
checker sees it: a module whose functions are untyped. spool/accel.py names their Python
twins in spool/format.py, and tests/test_spool_reader.py checks them against those."""

from typing import Any

def __getattr__(name: str) -> Any: ...
