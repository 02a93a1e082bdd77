"""The C accelerator (normalizer/fastscan.c, built by scripts/build_native.sh) as the type
checker sees it: a module whose functions are untyped. normalizer/accel.py says which Python
function each one is the twin of, and tests/test_normspeed.py checks them against those."""

from typing import Any

def __getattr__(name: str) -> Any: ...
