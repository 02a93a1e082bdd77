"""The normalizer pipeline: a spool in, the archive's members out.

Stage A streams the spool in ring order: decode -> attribute to the process
tree -> resolve paths -> merge network blocks -> judge file blocks ->
classify -> drop telemetry -> file the evidence under its thread. Stage B
numbers the tree and writes the kernel layer in canonical order (process
number, then the first thread's own syscall order, then the other threads'
records by content, normalizer/order.py: never arrival order across CPUs),
gathering what the other members need.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter

import msgspec

from normalizer import accel
from normalizer.artifacts import (
    RUN_EVENT_SCHEMA,
    SURFACE_SCHEMA,
    CapabilitySurface,
    CorrelationReport,
    KernelEvent,
    ObservationHealth,
    PolicyEvent,
    RunEvent,
    SdkEvent,
)
from normalizer.blocks import FileBlockJudge
from normalizer.buckets import Run, ThreadBuckets, shape_of
from normalizer.classify import Classified
from normalizer.correlate import END, Block, correlate, decisions, policy_events
from normalizer.faults import fault_notes
from normalizer.health import CaptureFacts, observation_health, privilege_note
from normalizer.kernel_lines import LINES_PER_WRITE, MEMO_ENTRIES, KernelLayer, KernelLines, join_lines
from normalizer.order import other_threads_order
from normalizer.redact import Redactor, may_hold_secrets
from normalizer.scan import Scan
from normalizer.sdk import ToolCall, sdk_layer
from normalizer.transient import Substitution, TransientNames
from normalizer.tree import Process, Thread, number_tree
from spool.format import Spool

_encoder = msgspec.json.Encoder()
SPILL_EVERY = 50_000
"""Evidence events held in memory before they are spilled to disk."""

FILE_KINDS = frozenset({"openat", "file_blocked"})
BLOCK_KINDS = frozenset({"file_blocked", "connect_blocked"})
ENDPOINT_KINDS = frozenset({"connect", "connect_blocked", "event_6", "event_7"})
"""Kinds whose values are network endpoints: connects and datagram peers (sendto,
sendmsg), as upstream's surface builder (crates/assay-runner-core/src/kernel.rs:198-210)."""
_KIND = attrgetter("kind")
_WRITES = ("write", "read_write")
RUN_PHASES = ("run_started", "run_finished")
"""The markers `events.ndjson` carries: upstream's run event types (run.rs:166-209)."""


@dataclass(frozen=True)
class NormalizedRun:
    """Everything the archive and the human summary need."""

    run_id: str
    kernel: KernelLayer
    health: ObservationHealth
    surface: CapabilitySurface
    correlation: CorrelationReport
    phases: list[RunEvent]
    policy_events: list[PolicyEvent] = field(default_factory=list)
    sdk_events: list[SdkEvent] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    """Files the command opened for writing, successfully (for the summary)."""
    blocked: list[str] = field(default_factory=list)
    """Paths and endpoints the policy denied (for the summary)."""

    @property
    def kernel_events(self) -> list[KernelEvent]:
        """The kernel layer decoded (reads it back: for tests and small runs)."""
        return self.kernel.events()

    def members(self) -> dict[str, bytes | KernelLayer]:
        """Archive members (all but the manifest); the kernel layer stays a stream."""
        return {
            "capability-surface.json": json_member(self.surface),
            "correlation-report.json": json_member(self.correlation),
            "events.ndjson": ndjson_member(self.phases),
            "layers/kernel.ndjson": self.kernel,
            "layers/policy.ndjson": ndjson_member(self.policy_events),
            "layers/sdk.ndjson": ndjson_member(self.sdk_events),
            "observation-health.json": json_member(self.health),
        }


def json_member(obj: msgspec.Struct) -> bytes:
    """Compact JSON, fixed key order, one trailing newline."""
    return _encoder.encode(obj) + b"\n"


def ndjson_member(items: list[msgspec.Struct]) -> bytes:
    """One compact JSON object per line."""
    return b"".join(_encoder.encode(i) + b"\n" for i in items)


def canonical_runs(buckets: ThreadBuckets, processes: list[Process],
                   names: Substitution) -> Iterator[tuple[Thread, Run]]:
    """Every filed event by process number, then its first thread's own order (as it was
    filed, run by run), then the other threads' records by content (normalizer/order.py;
    `names` gives the canonical values), consecutive events of one thread as one run."""
    for proc in processes:
        first, *others = proc.threads()
        for run in buckets.runs(first):
            yield first, run
        if not others:
            continue
        current: Thread | None = None
        shapes: list[Classified] = []
        pairs: list[int] = []
        for thread, c in other_threads_order([(t, buckets.events(t)) for t in others], names.apply):
            if thread is not current and shapes:
                yield current, (shapes, pairs)  # type: ignore[misc]
                shapes, pairs = [], []
            current = thread
            shapes.append(shape_of(c))
            pairs.append(c.order)
            pairs.append(c.ts)
        if shapes:
            yield current, (shapes, pairs)  # type: ignore[misc]


def _rank(thread: Thread) -> tuple[int, int]:
    """A thread's canonical position: (process number, thread rank; 0 is the first thread)."""
    return thread.process.number, thread.rank


def candidates(spool: Spool) -> tuple[list[Classified], CaptureFacts, FileBlockJudge]:
    """All evidence candidates (telemetry included) in canonical order, in memory.

    For tests and offline inspection; `normalize` streams instead.
    """
    evidence, facts, judge, _ = named_candidates(spool)
    return evidence, facts, judge


def named_candidates(spool: Spool) -> tuple[list[Classified], CaptureFacts, FileBlockJudge, Substitution]:
    """`candidates`, and the transient-name substitution the archive was written with (raw values kept)."""
    scan = Scan(spool)
    buckets = ThreadBuckets(SPILL_EVERY)
    transient = TransientNames()
    scan.file(buckets, transient, drop_telemetry=False)
    processes = number_tree(scan.tree.root)
    names = transient.finish(_rank)
    out = [msgspec.structs.replace(shape, order=pairs[2 * i], ts=pairs[2 * i + 1],
                                   process=t.process.number, thread_rank=t.rank)
           for t, (shapes, pairs) in canonical_runs(buckets, processes, names)
           for i, shape in enumerate(shapes)]
    buckets.close()
    return out, scan.facts(spool.trailer, spool.header.platform), scan.judge, names


def dac_questions(spool: Spool) -> list[tuple[str, str]]:
    """(access, path) pairs the runner must check as the command's user (sorted, unique)."""
    scan = Scan(spool)
    buckets = ThreadBuckets(SPILL_EVERY)
    scan.file(buckets, TransientNames(), drop_telemetry=True)
    buckets.close()
    return sorted(set(scan.judge.unattributed))


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


class _Collector:
    """Stage B: writes the kernel layer in canonical order and gathers what the
    other members need, holding only sets of distinct values and the capture
    times inside tool-call windows. Every value is redacted before it is
    written or collected, so all members carry the same redacted text."""

    def __init__(self, run_id: str, calls: list[ToolCall], redactor: Redactor,
                 names: Substitution | None = None) -> None:
        self.run_id = run_id
        self.layer = KernelLayer()
        self.values: dict[str, set[str]] = {
            k: set() for k in ("files", "endpoints", "execs", "written", "blocked")}
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
            if suspect:
                before = redactor.count
                values[k] = redactor.redact(values[k])  # type: ignore[arg-type]
                clean[k] = redactor.count == before
        self._collect(shapes, values)
        return self._lines.tails(shapes, values), clean

    def _collect(self, shapes: list[Classified], values: list[str | None]) -> None:
        """Gather the shapes' kinds and (final) values for the surface and the summary."""
        self.kinds.update(map(_KIND, shapes))
        files, written, blocked = self.values["files"], self.values["written"], self.values["blocked"]
        for c, value in zip(shapes, values, strict=True):
            if value is None:
                continue
            kind = c.kind
            if kind in FILE_KINDS:
                files.add(value)
                m = c.meta
                if kind == "openat" and m is not None and m.status is None and m.access_mode in _WRITES:
                    written.add(value)
            elif kind in ENDPOINT_KINDS:
                self.values["endpoints"].add(value)
            elif kind == "exec":
                self.values["execs"].add(value)
            if kind in BLOCK_KINDS:
                blocked.add(value)

    def surface(self, policy_lines: list[PolicyEvent]) -> CapabilitySurface:
        """The surface: kernel values, and the tools and `{decision}:{tool}` of the policy lines."""
        return CapabilitySurface(
            schema=SURFACE_SCHEMA, run_id=self.run_id,
            filesystem_paths=sorted(self.values["files"]),
            network_endpoints=sorted(self.values["endpoints"]),
            process_execs=sorted(self.values["execs"]),
            mcp_tools=sorted({p.tool for p in policy_lines}),
            policy_decisions=sorted({f"{p.decision}:{p.tool}" for p in policy_lines}),
        )


@dataclass
class Scanned:
    """Stage A's result over a spool's records: the tree, the filed evidence, the names.

    Stage A needs only the header and the records in ring order, so the
    runner runs it while the command runs, over the spool as it grows
    (runner/capture/live.py); `finish` then needs the complete spool's small
    frames (phases, SDK messages, trailer).
    """

    scan: Scan
    buckets: ThreadBuckets
    transient: TransientNames


def scan(spool: Spool) -> Scanned:
    """Stage A over `spool.records` (walked once, in ring order)."""
    scanned = Scanned(Scan(spool), ThreadBuckets(SPILL_EVERY), TransientNames())
    scanned.scan.file(scanned.buckets, scanned.transient, drop_telemetry=True)
    return scanned


def normalize(spool: Spool, run_id: str | None = None) -> NormalizedRun:
    """Normalize a complete spool; `run_id` overrides the spool's own.

    Memory stays flat in run length: records stream from the spool, evidence
    waits per thread (spilled to disk past a limit), and the kernel layer is
    written to a temp file. Every agent-provided string is redacted on the
    way in (normalizer/redact.py); the tally is a health note.
    """
    return finish(scan(spool), spool, run_id)


def finish(scanned: Scanned, spool: Spool, run_id: str | None = None) -> NormalizedRun:
    """Stage B and the members, from stage A's result and the complete spool's small frames.

    `spool` must be the spool `scanned` was made from (the same header and
    records), now with its phases, SDK messages and trailer.
    """
    run_id = run_id or spool.header.run_id
    redactor = Redactor()
    sdk = sdk_layer(spool.sdk, run_id, redactor)  # stage A never redacts: the tally is the same
    processes = number_tree(scanned.scan.tree.root)
    names = scanned.transient.finish(_rank)
    out = _Collector(run_id, sdk.tool_calls, redactor, names)
    buckets = scanned.buckets
    for thread, run in canonical_runs(buckets, processes, names):
        out.add_run(thread.process.number, run)
    out.layer.end()  # its worker finishes the sweep, digest and deflate while the members are made
    buckets.close()
    facts = scanned.scan.facts(spool.trailer, spool.header.platform)

    decided = decisions(sdk.tool_calls, out.blocks)
    policy_lines = policy_events(decided, run_id)
    markers = [p for p in spool.phases if p.name in RUN_PHASES]
    phases = [RunEvent(schema=RUN_EVENT_SCHEMA, run_id=run_id, seq=i, type=p.name)  # type: ignore[arg-type]
              for i, p in enumerate(markers)]
    notes = [n for n in (sdk.note, privilege_note(spool.header.uid, spool.header.policy)) if n]
    notes += fault_notes(spool.trailer)
    if policy_lines:
        notes.append(f"s4_policy_capture: decision_events={len(policy_lines)}")  # policy.rs:183-186
    notes.append(redactor.note())
    if (note := names.note()) is not None:
        notes.append(note)
    return NormalizedRun(
        run_id=run_id,
        kernel=out.layer,
        health=observation_health(
            run_id, out.kinds, out.layer.count, facts, extra_notes=notes,
            policy_layer="present" if policy_lines else "absent", sdk_layer=sdk.status),
        surface=out.surface(policy_lines),
        correlation=correlate(sdk.tool_calls, decided, out.stamps, sdk.sdk_events, out.layer.count, run_id),
        phases=phases,
        policy_events=policy_lines,
        sdk_events=sdk.sdk_events,
        written=sorted(out.values["written"]),
        blocked=sorted(out.values["blocked"]),
    )
