"""The ways the normalizer can take a spool, for tests that must get the same archive from each."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from normalizer import accel, build, collector, scan, surface

MODES = ("native", "python", "general")
"""The C fast path (when built), the Python twin, and the general way for every record (with
stage B working out every spilled chunk itself: nothing prepared in stage A)."""


@contextlib.contextmanager
def mode(name: str, tiny: bool = False) -> Iterator[None]:
    """Normalize the `name` way; `tiny` memos and spills make every limit and rotation happen."""
    with pytest.MonkeyPatch.context() as mp:
        if name != "native":
            mp.setattr(accel, "native", None)
        if name == "general":
            mp.setattr(scan, "FAST", False)
            mp.setattr(build, "PREPARE", False)
        if tiny:
            mp.setattr(scan, "OPEN_MEMO", 2)
            mp.setattr(build, "SPILL_EVERY", 3)
            mp.setattr(collector, "MEMO_ENTRIES", 2)
            mp.setattr(surface, "HELD_VALUES", 2)
            mp.setattr(surface, "FRAME_VALUES", 2)
            mp.setattr(surface, "FAN_IN", 2)
            mp.setattr(surface, "ENCODE_VALUES", 2)
        yield
