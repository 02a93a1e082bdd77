"""The batch frames of spool bytes, typed as batches, for tests of the ring sink's output."""

from __future__ import annotations

import io

from spool.format import Batch, iter_frames


def batch_frames(data: bytes) -> list[Batch]:
    """Every frame of `data`, each a batch: the ring sink writes no other kind, so any other frame
    fails the calling test here, by name, rather than later on a missing attribute."""
    frames = list(iter_frames(io.BytesIO(data)))
    for frame in frames:
        assert isinstance(frame, Batch), frame
    return [frame for frame in frames if isinstance(frame, Batch)]
