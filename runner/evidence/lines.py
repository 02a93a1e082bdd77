"""The NDJSON members checked line by line as they stream by, never held whole.

Each line decodes strictly with its Struct, its `seq` runs 0..n-1, and the
in-member rules apply (runner/evidence/conformance/). What the cross-member
checks need is kept as it goes: the kernel layer's counts and distinct
values (`kernel.KernelFacts`, spilled past a bound), the other layers' lines
up to `MAX_HELD_LINES`, and every run_id against the archive's.

Time is linear in the member's size, and kept low for the kernel layer,
which may hold millions of lines, by taking a block of lines (about a MiB)
at once where it is regular, as the runner writes it: every line starts
`{"schema":"assay.runner.kernel_event.v0","run_id":"ID","seq":N,"pid":M,`
with canonical, in-range numbers (`_PREFIX`, matched in C over the block).
What follows the prefix (the line's "shape") decides every rule (the rules
never read seq or pid: upstream.kernel_schema_errors replaces both), so each
distinct shape is decoded and checked once (remembered in a bounded cache,
`SHAPES`), the seqs are compared with their expected run in one step, and
the counts go to `KernelFacts` per shape. A block with anything else (a line
off the pattern, a blank or indented line, a seq out of order, a shape with a
problem, another run_id) is checked line by line in full, so its problems are
exactly those of the full check.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from normalizer.artifacts import KernelEvent, PolicyEvent, RunEvent, SdkEvent
from runner.evidence.bounded import (
    MAX_LINE_BYTES,
    ChunkedMember,
    block_lines,
    iter_line_blocks,
    iter_lines,
    member_chunks,
)
from runner.evidence.conformance import kernel, layers
from runner.evidence.conformance.base import EVENTS, KERNEL, POLICY, SDK, Parsed, Problem

LINE_TYPES: dict[str, type[msgspec.Struct]] = {
    EVENTS: RunEvent,
    KERNEL: KernelEvent,
    POLICY: PolicyEvent,
    SDK: SdkEvent,
}
"""NDJSON members: every non-empty line decodes independently as this type, and its
`seq` runs 0..n-1 in line order (kernel.rs:217,234; policy.rs:112; sdk.rs:105-113; run.rs:166-209)."""
LINE_RULES: dict[type, Callable[[Any], Iterable[str]]] = {
    KernelEvent: kernel.line_rules,
    SdkEvent: layers.sdk_line_rules,
}
MAX_HELD_LINES = 100_000
"""Lines of the events, policy and SDK layers held for the cross-member checks (a run's tool
calls and phases: thousands at most). Past it the layer is a problem and its cross checks skip;
the kernel layer is never held."""
SHAPES = 1 << 16
"""Kernel line shapes (a line less its prefix) whose check is remembered; the cache starts again
when full, so it costs at most a few MiB."""

_HEAD = b'{"schema":"assay.runner.kernel_event.v0","run_id":"%s","seq":%s,"pid":%s,'
_PREFIX = re.compile(rb'\n\{"schema":"assay\.runner\.kernel_event\.v0","run_id":"([A-Za-z0-9_-]{1,128})",'
                     rb'"seq":(0|[1-9][0-9]{0,17}),"pid":(0|[1-9][0-9]{0,8}),')
"""`_HEAD` after a newline (so only at a line's start), as the runner writes it: every piece fixed
or of a set that holds no quote or backslash, so a match is the line's first keys, never text inside
a string; the numbers canonical and within the Struct's range (NonNegative seq, U32 pid)."""
_HEAD_BYTES = 256
"""More than `_HEAD` can be: a line whose remainder is within `limit` less this is within `limit`."""
_decoders: dict[type, msgspec.json.Decoder[Any]] = {t: msgspec.json.Decoder(t) for t in LINE_TYPES.values()}


def decode_error(exc: msgspec.MsgspecError | UnicodeDecodeError) -> str:
    return str(exc) or type(exc).__name__


class _Shape(msgspec.Struct, frozen=True, array_like=True):
    """What the full check found on a kernel line without problems, for every line of its shape."""

    event_type: int
    value: str | None


class _Checker:
    """One member's line loop state: seq order, the rules, and what is kept."""

    def __init__(self, name: str, parsed: Parsed) -> None:
        self.name, self.parsed = name, parsed
        kind = LINE_TYPES[name]
        self.decoder, self.rules = _decoders[kind], LINE_RULES.get(kind, lambda _: ())
        self.facts = kernel.KernelFacts() if name == KERNEL else None
        self.held: list[tuple[int, Any]] = []
        self.shapes: dict[bytes, _Shape] = {}
        self.offset = 0  # seq minus position on the previous decoded line
        self.position = -1

    def _seq(self, seq: int, number: int, out: list[Problem]) -> None:
        # A missing, extra or renumbered line shifts every later seq by the
        # same amount: report the shift once, where it starts.
        if seq != self.position and seq - self.position != self.offset:
            out.append(Problem(self.name, f"seq is {seq}, expected {self.position}", number))
        self.offset = seq - self.position

    def _shape(self, rest: bytes, line: bytes) -> _Shape | None:
        """The remembered check of the shape `rest` (`line` is one line of it); None when the line
        has a problem (the block is then checked line by line, where it is reported)."""
        shape = self.shapes.get(rest)
        if shape is None:  # not seen yet: decode it and apply the rules
            try:
                item = self.decoder.decode(line)
            except (msgspec.MsgspecError, UnicodeDecodeError):
                return None
            if any(True for _ in self.rules(item)):
                return None
            shape = _Shape(item.event_type, item.value)
            if len(self.shapes) >= SHAPES:
                self.shapes.clear()
            self.shapes[rest] = shape
        return shape

    def block(self, block: bytes, limit: int) -> bool:
        """Check a block of whole kernel lines at once: False, having changed nothing, unless it
        is regular and has no problem (see the module's docstring)."""
        if self.parsed.run_id is None:
            return False
        lines = block.count(b"\n") + 1
        parts = _PREFIX.split(b"\n" + block)  # "", then run_id, seq, pid, remainder for each line
        if len(parts) != 4 * lines + 1 or parts[0]:
            return False  # a line off the pattern (blank, indented, other keys) joined a remainder
        run_ids, seqs, pids, rests = parts[1::4], parts[2::4], parts[3::4], parts[4::4]
        first = self.position + 1 + self.offset
        if list(map(int, seqs)) != list(range(first, first + lines)) \
                or set(run_ids) != {self.parsed.run_id[0].encode()} \
                or max(map(len, rests)) > limit - _HEAD_BYTES:
            return False
        counts = Counter(rests)
        shapes = {rest: self.shapes.get(rest) for rest in counts}
        if None in shapes.values():
            firsts = dict(zip(reversed(rests), range(lines - 1, -1, -1), strict=True))  # first line of each
            for rest, shape in shapes.items():
                if shape is None:
                    i = firsts[rest]
                    shapes[rest] = self._shape(rest, _HEAD % (run_ids[i], seqs[i], pids[i]) + rest)
                    if shapes[rest] is None:
                        return False
        for rest, count in counts.items():
            shape = shapes[rest]
            self.facts.add(shape.event_type, shape.value, count)  # type: ignore[union-attr]  # kernel only
        self.position += lines
        return True

    def _decode(self, raw: bytes, number: int, out: list[Problem]) -> Any:
        try:
            return self.decoder.decode(raw)
        except (msgspec.MsgspecError, UnicodeDecodeError) as exc:  # msgspec: a str not UTF-8
            self.parsed.broken.add(self.name)
            out.append(Problem(self.name, decode_error(exc), number))
            return None

    def line(self, number: int, raw: bytes | None, out: list[Problem]) -> None:
        """Check one line; its problems are appended to `out`."""
        self.position += 1
        if raw is None:
            self.parsed.broken.add(self.name)
            out.append(Problem(self.name, f"longer than {MAX_LINE_BYTES} bytes, the most a line may hold",
                               number))
            return
        item = self._decode(raw, number, out)
        if item is None:
            return
        self._seq(item.seq, number, out)
        out.extend(Problem(self.name, message, number) for message in self.rules(item))
        self.parsed.saw_run_id(self.name, number, item.run_id)
        if self.facts is not None:
            self.facts.add(item.event_type, item.value)
        elif len(self.held) < MAX_HELD_LINES:
            self.held.append((number, item))
        elif self.name not in self.parsed.broken:
            self.parsed.broken.add(self.name)
            out.append(Problem(self.name, f"more than {MAX_HELD_LINES} lines, the most this layer's "
                               "cross-member checks hold", number))

    def finish(self) -> None:
        if self.facts is not None:
            self.parsed.kernel = self.facts
        else:
            self.parsed.lines[self.name] = self.held


def check_lines(name: str, data: ChunkedMember, parsed: Parsed) -> Iterator[Problem]:
    """Every problem of the NDJSON member `name`, line by line; what the cross checks need goes
    into `parsed` (the kernel layer's `KernelFacts` there must be closed by the caller)."""
    checker = _Checker(name, parsed)
    out: list[Problem] = []
    for first, block in iter_line_blocks(member_chunks(data)):
        if block is not None and checker.facts is not None and checker.block(block, MAX_LINE_BYTES):
            continue
        lines = block_lines(first, block) if block is not None else ((first, None),)
        for number, raw in lines:
            checker.line(number, raw, out)
            if out:
                yield from out
                out.clear()
    checker.finish()


def locator(data: ChunkedMember) -> kernel.Locate:
    """Finds the first kernel line of each of some values by reading the layer again (only
    values a surface lacks, named in a problem, are looked for)."""

    def locate(ids: tuple[int, ...], values: set[str]) -> dict[str, tuple[int, str]]:
        found: dict[str, tuple[int, str]] = {}
        needles = [msgspec.json.encode(v) for v in values]
        for number, raw in iter_lines(member_chunks(data)):
            if raw is None or not any(n in raw for n in needles):
                continue
            try:
                e = _decoders[KernelEvent].decode(raw)
            except (msgspec.MsgspecError, UnicodeDecodeError):
                continue
            if e.event_type in ids and e.value in values and e.value not in found:
                found[e.value] = (number, e.kind)
                if len(found) == len(values):
                    break
        return found

    return locate
