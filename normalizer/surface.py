"""The capability surface's distinct values in bounded memory, and `capability-surface.json` streamed.

An agent that opens many distinct names (open_heavy's missing files all
differ; a hostile one can open millions) made the surface the one thing
stage B held per distinct value: every value in a set, then sorted lists,
then the encoded member, then the runner's copy of it. Here the values
(`DistinctValues`, filled by normalizer/collector.py) are held in sets only
up to `HELD_VALUES`; past it they are spilled as sorted runs to an
anonymous temp file and merged back k-way, without duplicates, as the member
is written (`write_surface`), a batch at a time, sorted in C. Runs are merged `FAN_IN`
at a time as they pile up, so a merge never reads more than that many at
once however many values there are.

The member is written to a file (`SurfaceFile`) with its sha256, size and
secret sweep worked out as it is written, as the kernel layer is: the live
normalizer hands it to the runner as a descriptor, and the archive writer
reads it back in blocks. Its bytes are exactly msgspec's encoding of
`CapabilitySurface` (tests/test_surface.py): the frame is encoded once with
empty lists and the values, encoded by msgspec in batches, are spliced into
it (msgspec writes a string the same inside a list as alone). The human
summary needs only a count and the first few of each set (`Preview`).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from functools import cache
from itertools import chain, compress, islice
from operator import lt, ne
from typing import BinaryIO

import msgspec

from normalizer.artifacts import SURFACE_SCHEMA, CapabilitySurface, json_member
from normalizer.redact import find_unredacted_bytes, rules

HELD_VALUES = 1 << 15
"""Distinct values held in memory (all sets together) before they are spilled as sorted runs:
about 4 MiB of `str` and set table for paths of open_heavy's length."""
FRAME_VALUES = 512
"""Values per frame of a spilled run: what a merge holds of each run it reads."""
FAN_IN = 16
"""Runs of one set merged at once: `FAN_IN` runs of the same size become one (the merge's memory is
`FAN_IN` frames per level, whatever the number of values)."""
ENCODE_VALUES = 1024
"""Values encoded (and swept, hashed, written) at once when the member is streamed."""
PREVIEW_VALUES = 5
"""Values of each set the human summary shows (runner/capture/status.py)."""
FILE_IN_MEMORY = 1 << 20
"""A surface member up to this size stays in memory; a larger one goes to an anonymous temp file."""
KERNEL_SETS = (("filesystem_paths", "files"), ("network_endpoints", "endpoints"), ("process_execs", "execs"))
"""The surface lists made of kernel values, in member order, and the set each is made from."""

_LEN = struct.Struct("<I")
_json = msgspec.json.Encoder()
_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(list[str]).decode


class Preview(msgspec.Struct, frozen=True):
    """How many distinct values a set has, and its first `PREVIEW_VALUES` in order (for the summary)."""

    count: int
    first: list[str]


class SurfacePreview(msgspec.Struct, frozen=True):
    """What the human summary shows of the surface and of the written and blocked sets."""

    files: Preview
    endpoints: Preview
    execs: Preview
    written: Preview
    blocked: Preview


class DistinctValues:
    """Sets of distinct values by name, bounded in memory: `sets` is what the collector adds to;
    `bound` spills them past `HELD_VALUES`; `sorted_values` gives a set's values sorted, once."""

    def __init__(self, names: Iterable[str]) -> None:
        self.sets: dict[str, set[str]] = {name: set() for name in names}
        self._runs: dict[str, list[tuple[int, int, int]]] = {name: [] for name in self.sets}
        """Each set's spilled runs: (level, start, end) in the spill file; a run of level L+1 is
        `FAN_IN` runs of level L merged."""
        self._file: BinaryIO | None = None

    def bound(self) -> None:
        """Spill every set as a sorted run once they hold `HELD_VALUES` values together (called
        after each batch the collector adds). The sets are emptied in place: the collector's
        routes point at them."""
        if sum(map(len, self.sets.values())) < HELD_VALUES:
            return
        for name, held in self.sets.items():
            if held:
                self._add_run(name, sorted(held))
                held.clear()

    def _add_run(self, name: str, values: Iterable[str]) -> None:
        runs = self._runs[name]
        runs.append((0, *self._write_run(values)))
        while len(runs) >= FAN_IN and len({level for level, _, _ in runs[-FAN_IN:]}) == 1:
            merging = runs[-FAN_IN:]
            del runs[-FAN_IN:]
            runs.append((merging[0][0] + 1, *self._write_run(_merged([self._read_run(r) for r in merging]))))

    def _write_run(self, values: Iterable[str]) -> tuple[int, int]:
        """Append sorted distinct `values` to the spill file as frames; their (start, end)."""
        if self._file is None:
            self._file = tempfile.TemporaryFile(buffering=0, prefix="assay-surface-")  # noqa: SIM115 - closed by close()
        out = self._file
        start = out.seek(0, os.SEEK_END)
        values = iter(values)
        while batch := list(islice(values, FRAME_VALUES)):
            body = _pack(batch)
            out.write(_LEN.pack(len(body)) + body)
        return start, out.tell()

    def _read_run(self, run: tuple[int, int, int]) -> Iterator[list[str]]:
        """A spilled run's frames of values, one at a time."""
        assert self._file is not None  # there are runs
        fd = self._file.fileno()
        _, at, end = run
        while at < end:
            (size,) = _LEN.unpack(os.pread(fd, _LEN.size, at))
            yield _unpack(os.pread(fd, size, at + _LEN.size))
            at += _LEN.size + size

    def sorted_values(self, name: str) -> Iterator[str]:
        """Set `name`'s distinct values in order (read once: the set is emptied into it)."""
        held = sorted(self.sets[name])
        self.sets[name].clear()
        runs = self._runs.pop(name)
        if not runs:
            return iter(held)
        return _merged([*map(self._read_run, runs), iter([held] if held else [])])

    def close(self) -> None:
        """Drop the spill file (anonymous: nothing is left behind however the process ends)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _merged(runs: list[Iterator[list[str]]]) -> Iterator[str]:
    """Runs of sorted distinct values (each given as sorted frames) merged into one, each value once."""
    return chain.from_iterable(_merged_batches(runs))


def _merged_batches(runs: list[Iterator[list[str]]]) -> Iterator[list[str]]:
    """`_merged` a batch at a time, with the sorting in C: every value up to the smallest last value
    of the runs' current frames (the fence) is in those frames (each run's later frames hold only
    larger values), so those are taken, sorted together (timsort merges the runs it finds) and
    given once each; then the exhausted frames are refilled. Each batch uses up at least one frame."""
    frames = [(frame, 0, run) for run in runs if (frame := next(run, None))]
    while frames:
        fence = min(frame[-1] for frame, _, _ in frames)
        batch: list[str] = []
        kept = []
        for frame, start, run in frames:
            cut = bisect_right(frame, fence, start)
            batch += frame[start:cut]
            if cut < len(frame):
                kept.append((frame, cut, run))
            elif (following := next(run, None)) is not None:
                kept.append((following, 0, run))
        batch.sort()
        yield list(compress(batch, chain(map(ne, batch, batch[1:]), (True,))))  # each value once
        frames = kept


@cache
def _rank() -> dict[str, int]:
    """Each secret rule's place in the table (which decides which rule a sweep reports)."""
    return {name: i for i, (name, _) in enumerate(rules())}


class _Sink:
    """The member's bytes to a file, with their sha256, size and secret sweep on the way.

    The sweep (publish's `find_unredacted_bytes`, which it ran on the whole
    member) goes piece by piece, as the kernel layer's goes line by line:
    every piece is whole JSON tokens, and no rule of the table can match
    across a `"` (none of their character classes takes one, and every value
    is quoted), so each match lies inside one piece and the first rule in
    table order found in any piece is the whole member's answer
    (tests/test_surface.py checks it on values made of the rules' pieces).
    """

    def __init__(self) -> None:
        self.file = tempfile.SpooledTemporaryFile(max_size=FILE_IN_MEMORY, prefix="assay-surface-")  # noqa: SIM115 - the member's file
        self.sha = hashlib.sha256()
        self.size = 0
        self.unredacted: str | None = None

    def write(self, piece: bytes) -> None:
        rule = find_unredacted_bytes(piece)
        if rule is not None and (self.unredacted is None or _rank()[rule] < _rank()[self.unredacted]):
            self.unredacted = rule
        self.sha.update(piece)
        self.size += len(piece)
        self.file.write(piece)

    def values(self, values: Iterator[str]) -> Preview:
        """Write `values` (which must be sorted and distinct: checked) as a JSON list's items."""
        first: list[str] = []
        count = 0
        last: list[str] = []
        while batch := list(islice(values, ENCODE_VALUES)):
            pairs = last + batch
            if not all(map(lt, pairs, pairs[1:])):
                raise RuntimeError("capability surface values are not sorted and distinct (a runner bug)")
            self.write((b"," if count else b"") + _json.encode(batch)[1:-1])
            first += batch[:PREVIEW_VALUES - len(first)]
            count += len(batch)
            last = batch[-1:]
        return Preview(count=count, first=first)


def _frame(run_id: str, mcp_tools: list[str], policy_decisions: list[str]) -> list[bytes]:
    """The member's bytes around its three kernel lists (empty), split where their values go."""
    encoded = json_member(CapabilitySurface(
        schema=SURFACE_SCHEMA, run_id=run_id, filesystem_paths=[], network_endpoints=[], process_execs=[],
        mcp_tools=mcp_tools, policy_decisions=policy_decisions))
    pieces, at = [], 0
    for field, _ in KERNEL_SETS:
        key = b'"%s":[]' % field.encode()
        cut = encoded.index(key, at) + len(key) - 1
        pieces.append(encoded[at:cut])
        at = cut
    pieces.append(encoded[at:])
    return pieces


def _preview(values: Iterator[str]) -> Preview:
    first = list(islice(values, PREVIEW_VALUES))
    return Preview(count=len(first) + sum(1 for _ in values), first=first)


def write_surface(values: DistinctValues, run_id: str, mcp_tools: list[str],
                  policy_decisions: list[str]) -> tuple[SurfaceFile, SurfacePreview]:
    """`capability-surface.json` from the collected `values` (sorted and merged as written), and
    the summary's preview of it and of the written and blocked sets. Reads `values` once."""
    sink = _Sink()
    frame = _frame(run_id, mcp_tools, policy_decisions)
    shown = {}
    for piece, (_, name) in zip(frame, KERNEL_SETS, strict=False):
        sink.write(piece)
        shown[name] = sink.values(values.sorted_values(name))
    sink.write(frame[-1])
    preview = SurfacePreview(**shown, written=_preview(values.sorted_values("written")),
                             blocked=_preview(values.sorted_values("blocked")))
    # sink.file: a SpooledTemporaryFile, which typeshed does not count as a BinaryIO
    return SurfaceFile(sink.file, sink.sha.hexdigest(), sink.size, sink.unredacted), preview  # type: ignore[arg-type]


def surface_member(surface: CapabilitySurface) -> SurfaceFile:
    """A surface built in memory as a member (for tests and tools that make one by hand)."""
    sink = _Sink()
    sink.write(json_member(surface))
    # sink.file: a SpooledTemporaryFile, which typeshed does not count as a BinaryIO
    return SurfaceFile(sink.file, sink.sha.hexdigest(), sink.size, sink.unredacted)  # type: ignore[arg-type]


class SurfaceFile:
    """`capability-surface.json` as written: its file (read back from the start), sha256, size and
    sweep result. The live normalizer hands the file to the runner as a descriptor
    (runner/capture/live_process.py); the archive writer reads it in blocks."""

    def __init__(self, file: BinaryIO, sha256: str, size: int, unredacted: str | None) -> None:
        self._file = file
        self.sha256 = sha256
        self.size = size
        self.unredacted = unredacted
        """The first secret rule the member still matches (the fail-closed sweep), or None."""

    def fileno(self) -> int:
        """The member's file descriptor, all its bytes in the file (an in-memory one is moved to a
        temp file first; what is buffered is flushed: another process reads it through the fd)."""
        descriptor = self._file.fileno()
        self._file.flush()
        return descriptor

    def reader(self) -> BinaryIO:
        """The member's bytes from the start (shares the file's position: read it before asking again)."""
        self._file.seek(0)
        return self._file

    def read_bytes(self) -> bytes:
        return self.reader().read()

    def decoded(self) -> CapabilitySurface:
        """The member decoded (reads it whole: for tests and small runs)."""
        return msgspec.json.decode(self.read_bytes(), type=CapabilitySurface)
