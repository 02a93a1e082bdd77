"""Spools as a runner that died leaves them: recorded spools cut before their trailer."""

from __future__ import annotations

from pathlib import Path

from spool.format import SPOOL_FORMAT, Batch, SpoolHeader, SpoolTrailer, encode_frame, iter_frames

DATA = Path(__file__).parent / "data"
HEADER = SpoolHeader(format=SPOOL_FORMAT, run_id="r", argv=["x"], workdir="/", control_pids=[], shim_pid=0,
                     ringbuf_pages=64)


def partial_of(recording: Path, to: Path, torn: int) -> int:
    """`recording` without its trailer, plus `torn` bytes of a frame cut short; its record count."""
    frames = [f for f in iter_frames(recording.open("rb")) if not isinstance(f, SpoolTrailer)]
    records = sum(len(f.records) for f in frames if isinstance(f, Batch))
    cut = encode_frame(Batch(records=[b"x" * 100]))[:torn]
    to.write_bytes(b"".join(encode_frame(f) for f in frames) + cut)
    return records
