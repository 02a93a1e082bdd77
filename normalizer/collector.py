"""Stage B's collector: the kernel layer written in canonical order, and what the other members need.

`Collector` takes the canonical runs (normalizer/build.py `canonical_runs`)
and writes each event's line: the tail of its shape (substituted, redacted,
encoded once per distinct shape), spliced after the run's head, seq and pid.
It gathers the distinct values of the surface and the summary, and the
capture times inside tool-call windows. `Prepared` does the per-shape part
ahead, in stage A, for chunks the scan spills (normalizer/buckets.py).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import Counter
from itertools import accumulate, chain, compress
from operator import attrgetter

from normalizer import accel
from normalizer.buckets import Ahead, Run, Spilled
from normalizer.classify import Classified, kind_name
from normalizer.correlate import END, Block
from normalizer.kernel_lines import (
    LINES_PER_WRITE,
    MEMO_ENTRIES,
    KernelLayer,
    KernelLines,
    join_indexed,
    join_lines,
)
from normalizer.kernelpaths import KERNEL_OPEN
from normalizer.redact import Redactor, may_hold_secrets
from normalizer.sdk import ToolCall
from normalizer.surface import DistinctValues
from normalizer.telemetry import O_TMPFILE_BIT, RUNTIME_WRITE
from normalizer.transient import Substitution

FILE_KINDS = frozenset({"openat", "file_blocked"})
RUNTIME_WRITE_KIND = kind_name(RUNTIME_WRITE)
WRITTEN_ONLY_KINDS = (RUNTIME_WRITE_KIND, kind_name(KERNEL_OPEN))
BLOCK_KINDS = frozenset({"file_blocked", "connect_blocked"})
ENDPOINT_KINDS = frozenset({"connect", "connect_blocked", "event_6", "event_7"})
"""Kinds whose values are network endpoints: connects and datagram peers (sendto,
sendmsg), as upstream's surface builder (crates/assay-runner-core/src/kernel.rs:198-210)."""
_KIND = attrgetter("kind")
_WRITES = ("write", "read_write")


class _Windows:
    """Union of the tool-call windows: is a capture time inside any of them?"""

    def __init__(self, calls: list[ToolCall]) -> None:
        spans = sorted((c.started_ts, c.finished_ts if c.finished_ts is not None else END) for c in calls)
        merged: list[list[int]] = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._starts = [m[0] for m in merged]
        self._ends = [m[1] for m in merged]

    def __contains__(self, ts: int) -> bool:
        i = bisect_right(self._starts, ts) - 1
        return i >= 0 and ts <= self._ends[i]


def unseen_shapes(shapes: list[Classified], by_id: dict[int, bytes]) -> list[Classified]:
    """The distinct objects of `shapes` whose id() is not a key of `by_id` (any order: each is
    done once, and what is done with one does not depend on the others; the C accelerator has
    the same function, in first-seen order)."""
    ids = list(map(id, shapes))
    distinct = dict(zip(ids, shapes, strict=True))
    return list(map(distinct.__getitem__, set(ids).difference(by_id)))


def tails_of(shapes: list[Classified], by_id: dict[int, bytes]) -> list[bytes]:
    """Each shape's tail from the memo by id (the C accelerator has the same function)."""
    return list(map(by_id.__getitem__, map(id, shapes)))


Route = tuple[set[str] | None, set[str] | None, set[str] | None]
"""Where a kind's values go: its surface set, the blocked set, the written set (None: not there)."""


def routes(values: dict[str, set[str]]) -> dict[str, Route]:
    """Each surface kind's route into `values`: files (successful writes also in `written`),
    endpoints, execs; blocks also in `blocked`. A write of a path Assay keeps out of the surface
    (`event_83`, normalizer/telemetry.py) or an io_uring open (`event_85`,
    normalizer/kernelpaths.py) is in `written` only."""
    def into(kind: str) -> set[str]:
        return values["files"] if kind in FILE_KINDS else values["endpoints"] if kind in ENDPOINT_KINDS \
            else values["execs"]
    surface: dict[str, Route] = {
        kind: (into(kind), values["blocked"] if kind in BLOCK_KINDS else None,
               values["written"] if kind == "openat" else None)
        for kind in FILE_KINDS | ENDPOINT_KINDS | {"exec"}}
    return surface | {kind: (None, None, values["written"]) for kind in WRITTEN_ONLY_KINDS}


def collect_values(shapes: list[Classified], values: list[str | None], kinds: set[str],
                   routes: dict[str, Route], writes: tuple[str, ...]) -> None:
    """Gather the shapes' kinds, and each (final) value into its kind's route: the written set only
    for an open that succeeded with an access mode in `writes`, not an O_TMPFILE one (its path is
    the directory the unnamed file is made in: `/tmp` is not a file written; the C accelerator has
    the same function)."""
    kinds.update(map(_KIND, shapes))
    for c, value in zip(shapes, values, strict=True):
        route = None if value is None else routes.get(c.kind)
        if route is None or value is None:
            continue
        into, blocked, written = route
        if into is not None:
            into.add(value)
        if blocked is not None:
            blocked.add(value)
        m = c.meta
        if written is not None and m is not None and m.status is None and m.access_mode in writes \
                and not m.flags & O_TMPFILE_BIT:  # O_TMPFILE names the directory of an unnamed file
            written.add(value)


VALUE_SETS = ("files", "endpoints", "execs", "written", "blocked")
"""The distinct values stage B gathers for the surface and the summary (normalizer/surface.py
holds them in bounded memory)."""


class Prepared:
    """Stage A's head start on stage B: called by ThreadBuckets for each chunk it spills
    (normalizer/buckets.py `Prepare`), it does for the chunk's distinct shapes what
    `Collector._first` would: their kernel-line tails, and their values gathered into its own
    sets (bounded: sorted and spilled in runs past a limit, normalizer/surface.py; so the
    surface's sort is mostly done here, beside the scan). A value that may hold a secret is left
    to stage B (its position in the chunk's `pending`), whose redactor counts every occurrence.
    What is prepared holds only when stage B writes values unchanged: no transient name
    substituted (`finish` checks, known only at the end, and otherwise ignores all of this). The
    tails do not depend on the run id (it is in the lines' head)."""

    def __init__(self, run_id: str) -> None:
        self.values = DistinctValues(VALUE_SETS)
        self.kinds: set[str] = set()
        self._lines = KernelLines(run_id)
        self._routes = routes(self.values.sets)
        native = accel.native
        self._collect = native.collect_values if native else collect_values

    def __call__(self, table: list[Classified]) -> Ahead:
        values = [s.value for s in table]
        suspects = may_hold_secrets(values)
        pending = array("Q", compress(range(len(table)), suspects))
        if pending:
            clean = [not s for s in suspects]
            done = iter(self._work(list(compress(table, clean)), list(compress(values, clean))))
            tails = [b"" if s else next(done) for s in suspects]
        else:
            tails = self._work(table, values)
        ends = list(accumulate(map(len, tails)))
        spans = array("Q", chain.from_iterable(zip([0, *ends][:-1], ends, strict=True)))
        return b"".join(tails), spans.tobytes(), pending.tobytes()

    def _work(self, shapes: list[Classified], values: list[str | None]) -> list[bytes]:
        self._collect(shapes, values, self.kinds, self._routes, _WRITES)
        self.values.bound()
        return self._lines.tails(shapes, values)


class Collector:
    """Stage B: writes the kernel layer in canonical order and gathers what the
    other members need, holding only the distinct values (bounded in memory,
    normalizer/surface.py) and the capture times inside tool-call windows.
    Every value is redacted before it is written or collected, so all members
    carry the same redacted text."""

    def __init__(self, run_id: str, calls: list[ToolCall], redactor: Redactor,
                 names: Substitution | None = None) -> None:
        self.run_id = run_id
        self.layer = KernelLayer()
        self.values = DistinctValues(VALUE_SETS)
        self.kinds: set[str] = set()
        self.blocks: list[Block] = []
        self.stamps: list[int] = []
        self._redactor = redactor
        self._names = names or Substitution({})
        self._windows = _Windows(calls)
        self._any_window = bool(calls)
        self._lines = KernelLines(run_id)
        self._by_id: dict[int, bytes] = {}
        native = accel.native
        self._join = native.join_lines if native else join_lines
        self._unseen = native.unseen_shapes if native else unseen_shapes
        self._lookup = native.tails_of if native else tails_of
        self._pinned: dict[int, Classified] = {}
        self._collect = native.collect_values if native else collect_values
        self._routes = routes(self.values.sets)
        self._join_indexed = native.join_indexed if native else join_indexed
        self._ahead = False

    def adopt(self, prepared: Prepared) -> None:
        """Take stage A's prepared chunks as they are (see `Prepared`: only when nothing is
        substituted), before any line is written: its values (and what it spilled) become
        this collector's, and prepared chunks are written from their tails."""
        if self.layer.count or self.kinds:
            raise RuntimeError("adopt() comes before the first line")
        self.values.close()
        self.values, self.kinds = prepared.values, prepared.kinds
        self._routes = routes(self.values.sets)
        self._ahead = True

    def add(self, pid: int, piece: Run | Spilled) -> None:
        """Write the lines of a run or a spilled chunk of process `pid`'s events: a chunk stage A
        prepared (`adopt`) by index from its tails, without reading its shapes back."""
        if not isinstance(piece, Spilled):
            self.add_run(pid, piece)
            return
        if not self._ahead or piece.ahead is None:
            self.add_run(pid, piece.run())
            return
        tails, spans, pending = piece.ahead
        if pending:
            tails, spans = self._settle(piece, tails, spans, pending)
        pid_part = b',"pid":%d,' % pid
        for start in range(0, piece.events, LINES_PER_WRITE):
            count = min(LINES_PER_WRITE, piece.events - start)
            lines = self._join_indexed(self._lines.head, self.layer.count, pid_part, tails, spans,
                                       piece.indexes, start, count)
            self.layer.write_block(lines, count)
        if self._any_window:
            self._stamp(piece)

    def _stamp(self, piece: Spilled) -> None:
        """The capture times of a chunk's events inside tool-call windows, and its blocks among
        them, in the chunk's order (as `add_run` stamps a run's); its shapes are read back only
        when one falls inside."""
        times = piece.pairs()[1::2]
        inside = [k for k, ts in enumerate(times) if ts in self._windows]
        if not inside:
            return
        table, index = piece.table(), memoryview(piece.indexes).cast("Q")
        for k in inside:
            self.stamps.append(times[k])
            if (kind := table[index[k]].kind) in BLOCK_KINDS:
                self.blocks.append(Block(times[k], kind))

    def _settle(self, piece: Spilled, tails: bytes, spans: bytes, pending: bytes) -> tuple[bytes, bytes]:
        """The tails stage A left pending (values that may hold a secret) worked out here, as
        `_tails_of` would: redacted once per occurrence when redaction changes them (the tally
        counts occurrences); appended to the block, with their spans."""
        table = piece.table()
        cuts, left = array("Q"), array("Q")
        cuts.frombytes(spans)
        left.frombytes(pending)
        counts = Counter(memoryview(piece.indexes).cast("Q"))
        block, end = [tails], len(tails)
        for j in left:
            shape = table[j]
            (tail,), (clean,) = self._first([shape])
            if not clean:
                self._first([shape] * (counts[j] - 1))
            cuts[2 * j], cuts[2 * j + 1] = end, end + len(tail)
            end += len(tail)
            block.append(tail)
        return b"".join(block), cuts.tobytes()

    def add_run(self, pid: int, run: Run) -> None:
        """Write the lines of a run of events of process `pid`, as one block.

        A shape's tail is looked up by the shape object (the scan shares one
        per shape: one lookup per distinct shape in the run); the lines are
        the run's head, seq and pid spliced onto the tails (`join_lines`).
        """
        shapes, pairs = run
        tails = self._tails_of(shapes)
        pid_part = b',"pid":%d,' % pid
        for start in range(0, len(tails), LINES_PER_WRITE):  # blocks that stay in the cache
            block = tails[start:start + LINES_PER_WRITE]
            lines = self._join(self._lines.head, self.layer.count, pid_part, block)
            self.layer.write_block(lines, len(block))
        if self._any_window:
            for shape, ts in zip(shapes, pairs[1::2], strict=True):
                if ts in self._windows:
                    self.stamps.append(ts)
                    if shape.kind in BLOCK_KINDS:
                        self.blocks.append(Block(ts, shape.kind))

    def _tails_of(self, shapes: list[Classified]) -> list[bytes]:
        """The tail of each shape. A shape whose value held a secret is redacted once per
        occurrence, as the tally counts occurrences; the memo is emptied past `MEMO_ENTRIES`
        (after the run: within one, each distinct shape is done once)."""
        by_id = self._by_id
        new = self._unseen(shapes, by_id)
        unclean: list[int] = []
        if new:
            tails, clean = self._first(new)
            keys = list(map(id, new))
            by_id.update(zip(keys, tails, strict=True))
            self._pinned.update(zip(keys, new, strict=True))  # alive while a key: ids stay unique
            for shape, ok in zip(new, clean, strict=True):
                if not ok:
                    unclean.append(id(shape))
                    self._first([shape] * (sum(s is shape for s in shapes) - 1))
        tails = self._lookup(shapes, by_id)
        for i in unclean:
            del by_id[i], self._pinned[i]
        if len(by_id) >= MEMO_ENTRIES:
            by_id.clear()
            self._pinned.clear()
        return tails

    def _first(self, shapes: list[Classified]) -> tuple[list[bytes], list[bool]]:
        """The line tails of shapes not in the memo, with their values collected, and whether
        redaction left each value alone.

        A value is substituted (transient names), then redacted; only values
        that may hold a secret are given to the redactor (`may_hold_secrets`
        tests the others in blocks, at memory speed).
        """
        values = [s.value for s in shapes]
        if self._names.count:
            apply = self._names.apply
            values = [None if v is None else apply(v) for v in values]
        clean = [True] * len(values)
        redactor = self._redactor
        for k, suspect in enumerate(may_hold_secrets(values)):
            value = values[k]
            if suspect and value is not None:  # a None is never suspect
                before = redactor.count
                values[k] = redactor.redact(value)
                clean[k] = redactor.count == before
        self._collect(shapes, values, self.kinds, self._routes, _WRITES)
        self.values.bound()
        return self._lines.tails(shapes, values), clean
