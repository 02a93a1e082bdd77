"""Every byte of an archive file checked: the gzip stream whole and the tar layout's zero bytes.

The tar reader (runner/evidence/bounded.py) stops at the first end-of-archive
block and never reads the gzip trailer, and it skips the padding after each
member's data unread. A file cut short by a few bytes, a corrupted CRC, a
second gzip member or garbage appended after the end would all still read as
the same members, and a digest match would call such a file intact. So after
the headers are read, one more pass inflates the whole file and checks:

- the gzip stream ends (zlib checks its CRC32 and ISIZE trailer against the
  inflated bytes) and not one byte follows it: the writer makes exactly one
  gzip member, so anything after it, a second member or zero padding alike,
  is refused;
- every byte the tar layout leaves to padding is zero: after each member's
  data up to the next 512-byte block, and after the last member, where there
  must be at least the two zero blocks that end a tar archive, a whole number
  of blocks, at most `MAX_TAIL_BYTES` of them.

The member data between is checked by the manifest digests. A damaged file is
an `ArchiveError` whose one line says where: the compressed or uncompressed
byte offset and what was found there. Inflation is bounded per call
(`INFLATE_BYTES`), so a block that inflates a thousandfold costs no more memory
than any other, and the pass stops once past the layout's end.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path


class Damaged(ValueError):
    """The file is not whole; the message says where (bounded.open_archive raises it as an
    ArchiveError)."""


READ_BYTES = 1 << 20
"""Compressed bytes read at once."""
INFLATE_BYTES = 4 << 20
"""Most inflated bytes produced by one zlib call."""
MAX_TAIL_BYTES = 1 << 20
"""Zero bytes allowed after the last member: the two end blocks, padded to a record (tar pads to
10240 bytes; upstream's writer adds no padding) with room to spare."""
END_BYTES = 2 * tarfile.BLOCKSIZE


def padding(members: Iterable[tarfile.TarInfo], end: int) -> list[tuple[int, int]]:
    """The uncompressed (start, stop) ranges the tar layout leaves zero before `end`, where the
    end-of-archive blocks start: each member's padding up to the next block."""
    ranges = []
    for info in members:
        stop = info.offset_data + info.size
        if stop % tarfile.BLOCKSIZE:
            ranges.append((stop, stop + -stop % tarfile.BLOCKSIZE))
    return [r for r in ranges if r[1] <= end]


def _nonzero(data: bytes) -> int:
    """Index of the first non-zero byte of `data`, or -1."""
    rest = data.lstrip(b"\0")
    return len(data) - len(rest) if rest else -1


class _Layout:
    """Checks inflated bytes against the zero ranges and the end as they come."""

    def __init__(self, zeros: list[tuple[int, int]], end: int) -> None:
        self.zeros, self.end, self.at = zeros, end, 0

    def feed(self, data: bytes) -> None:
        start, self.at = self.at, self.at + len(data)
        if self.at > self.end + MAX_TAIL_BYTES:
            raise Damaged(f"damaged: more than {MAX_TAIL_BYTES} bytes after the end of the tar "
                          f"archive at uncompressed byte {self.end}")
        for zstart, zstop in self.zeros:
            if zstart < self.at and zstop > start:
                self._zero(data, start, max(zstart, start), min(zstop, self.at), "in a member's padding")
        if self.at > self.end:
            self._zero(data, start, max(self.end, start), self.at, "after the end of the tar archive")

    @staticmethod
    def _zero(data: bytes, base: int, lo: int, hi: int, what: str) -> None:
        i = _nonzero(data[lo - base:hi - base])
        if i >= 0:
            raise Damaged(f"damaged: non-zero byte {data[lo - base + i]:#04x} {what} "
                          f"at uncompressed byte {lo + i}")

    def finish(self) -> None:
        tail = self.at - self.end
        if tail < END_BYTES:
            raise Damaged(f"damaged: the tar end-of-archive blocks are missing (the stream ends "
                          f"{tail} bytes after the last member, at uncompressed byte {self.at}; "
                          f"{END_BYTES} zero bytes end an archive)")
        if tail % tarfile.BLOCKSIZE:
            raise Damaged(f"damaged: the tar archive ends at uncompressed byte {self.at}, not on a "
                          f"{tarfile.BLOCKSIZE}-byte block")


TRAILER = {"incorrect data check": "CRC32", "incorrect length check": "ISIZE (length)"}
"""zlib's words for a gzip trailer that does not match the inflated bytes."""


def _corrupt(exc: zlib.error, start: int, stop: int) -> str:
    field = next((name for words, name in TRAILER.items() if words in str(exc)), None)
    if field:
        return (f"damaged: the gzip trailer's {field} does not match the inflated bytes "
                f"(trailer within compressed bytes {start}-{stop})")
    return f"damaged: the gzip stream is corrupt within compressed bytes {start}-{stop}: {exc}"


def check_intact(path: Path, members: Iterable[tarfile.TarInfo], end: int) -> None:
    """Inflate the whole file at `path`; Damaged (one line, where) unless the gzip stream is
    whole, alone in the file, and its tar layout's padding and end are the zeros they must be.

    `members` are the tar headers read, `end` the uncompressed offset of the first end block."""
    layout = _Layout(padding(members, end), end)
    inflater = zlib.decompressobj(wbits=31)
    consumed = 0
    with open(path, "rb") as f:
        while not inflater.eof:
            chunk = f.read(READ_BYTES)
            if not chunk:
                raise Damaged(f"damaged: the gzip stream is cut short at byte {consumed} "
                              "(no end-of-stream and trailer)")
            pending, full = chunk, True
            while (pending or full) and not inflater.eof:  # full: zlib may hold more output
                try:
                    out = inflater.decompress(pending, INFLATE_BYTES)
                except zlib.error as exc:
                    raise Damaged(_corrupt(exc, consumed, consumed + len(chunk))) from exc
                layout.feed(out)
                pending, full = inflater.unconsumed_tail, len(out) == INFLATE_BYTES
            consumed += len(chunk)
        after = len(inflater.unused_data) + len(f.read(1))
    if after:
        raise Damaged(f"damaged: bytes follow the end of the gzip stream at byte "
                      f"{consumed - len(inflater.unused_data)}")
    layout.finish()
