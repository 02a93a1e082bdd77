"""Raw-deflate segments spliced into one gzip member, so the kernel layer is compressed as it is written.

The archive (runner/evidence/archive.py) is one gzip member whose deflate
stream is made of independent segments: the tar bytes up to and including
the kernel layer's header, the kernel layer's data, and the rest. Each
segment is deflated by a fresh compressor at `LEVEL` and ended by a full
flush (an empty stored block: byte-aligned, no reference back), so any
segment can be deflated before the others exist: the kernel layer's during
stage B (normalizer/layer_digest.py), the small members' at publish time.
The result is still one ordinary deflate stream (readers see blocks, some
empty), and its bytes depend only on the members: zlib's output does not
depend on how the input was cut into calls (tests/test_deflate.py).

The gzip trailer needs the CRC-32 of the whole tar: each segment's CRC comes
with it and `crc32_combine` joins them (zlib's algorithm; Python's zlib does
not expose it).
"""

from __future__ import annotations

import io
import shutil
import struct
import zlib
from dataclasses import dataclass
from functools import cache
from typing import Any, BinaryIO

LEVEL = 3
"""zlib level: on a 44 MB open-heavy kernel layer, level 3 takes 0.07 s for 1.58 MB and
level 9 0.75 s for 1.17 MB (docs/benchmarks.md). The bytes depend only on the members
and this level (and zlib's version), so archives stay byte-identical across runs."""
GZIP_HEADER = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + b"\x00\xff"
"""What `gzip.GzipFile(filename="", mtime=0, compresslevel=LEVEL)` writes: no name, mtime 0,
no extra flags (the level is neither 1 nor 9), OS 255 (unknown)."""
_ZLIB_GZIP_HEADER = 10
"""Bytes of the header zlib writes itself in gzip mode (no name, no extra): dropped, see `Segment`."""
_EMPTY_FINAL_BLOCK = b"\x03\x00"
"""A final fixed-Huffman block holding only its end code: how zlib ends a flushed stream."""


@dataclass(frozen=True)
class Deflated:
    """A member's data as a finished segment: its deflate bytes (read from the start), CRC-32, size."""

    data: BinaryIO
    crc32: int
    size: int


class Segment:
    """Deflates the bytes given in order into `out` as one segment, ended by a full flush.

    zlib runs in gzip mode so that it computes the CRC-32 as it deflates (in
    the same call, without the GIL): its own header is dropped, and after the
    full flush, Z_FINISH adds only an empty final block and the trailer, from
    which the CRC is read. The deflate bytes are those raw mode gives.
    """

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._z = zlib.compressobj(LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        self._skip = _ZLIB_GZIP_HEADER
        self.size = 0

    def write(self, data: bytes) -> None:
        self.size += len(data)
        self._emit(self._z.compress(data))

    def _emit(self, data: bytes) -> None:
        if self._skip:
            cut = min(self._skip, len(data))
            self._skip -= cut
            data = data[cut:]
        if data:
            self._out.write(data)

    def finish(self) -> int:
        """End the segment (full flush); the CRC-32 of everything written."""
        self._emit(self._z.flush(zlib.Z_FULL_FLUSH))
        tail = self._z.flush(zlib.Z_FINISH)
        crc: int
        size: int
        crc, size = struct.unpack("<II", tail[len(_EMPTY_FINAL_BLOCK):]) if len(tail) == 10 else (0, -1)
        if tail[:2] != _EMPTY_FINAL_BLOCK or size != self.size & 0xFFFFFFFF:
            raise RuntimeError("zlib ended a flushed deflate segment unexpectedly")
        return crc


def deflated(data: bytes) -> Deflated:
    """`data` as a finished segment (what a streamed member makes as it is written)."""
    out = io.BytesIO()
    segment = Segment(out)
    segment.write(data)
    crc = segment.finish()
    out.seek(0)
    return Deflated(out, crc, len(data))


class GzipSegments:
    """One gzip member written as segments: `write` into the current one, `splice` a finished one
    in; `close` ends the last, adds an empty final block and the trailer (CRC-32 and size)."""

    def __init__(self, out: BinaryIO) -> None:
        out.write(GZIP_HEADER)
        self._out = out
        self._segment = Segment(out)
        self._crc = 0
        self._size = 0

    def write(self, data: bytes) -> None:
        self._segment.write(data)

    def _end_segment(self) -> None:
        self._crc = crc32_combine(self._crc, self._segment.finish(), self._segment.size)
        self._size += self._segment.size

    def splice(self, done: Deflated) -> None:
        self._end_segment()
        shutil.copyfileobj(done.data, self._out)
        self._crc = crc32_combine(self._crc, done.crc32, done.size)
        self._size += done.size
        self._segment = Segment(self._out)

    def close(self) -> None:
        self._end_segment()
        self._out.write(_EMPTY_FINAL_BLOCK)
        self._out.write(struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))


_POLY = 0xEDB88320  # CRC-32, reflected


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (reflected bit order), as zlib's multmodp."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if a & (m - 1) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


@cache
def _x2n_table() -> tuple[int, ...]:
    """x^(2^k) modulo the polynomial, k = 0..31."""
    table, p = [], 1 << 30  # x^1
    for _ in range(32):
        table.append(p)
        p = _multmodp(p, p)
    return tuple(table)


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of A + B from A's CRC, B's CRC and B's length (zlib's crc32_combine)."""
    table, p, k = _x2n_table(), 1 << 31, 3  # x^0; the length is in bytes, x^(8 * len2)
    while len2:
        if len2 & 1:
            p = _multmodp(table[k & 31], p)
        len2 >>= 1
        k += 1
    return _multmodp(p, crc1) ^ crc2


class _Inflating(io.RawIOBase):
    """A finished segment's bytes, inflated as they are read (memory: one read's worth)."""

    def __init__(self, data: BinaryIO) -> None:
        self._data = data
        self._z = zlib.decompressobj(-zlib.MAX_WBITS)
        self._ready = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._ready:
            raw = self._data.read(1 << 16)
            self._ready = self._z.decompress(raw) if raw else self._z.flush()
            if not raw and not self._ready:
                return 0
        n = min(len(buffer), len(self._ready))
        buffer[:n] = self._ready[:n]
        self._ready = self._ready[n:]
        return n


def inflated(done: Deflated) -> BinaryIO:
    """The bytes `done` holds, from the start, as a stream."""
    done.data.seek(0)
    return io.BufferedReader(_Inflating(done.data), 1 << 20)
