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

import os
import tempfile
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec

from ebpf.wire import HOOK_NAMES
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
from normalizer.blocks import FileBlockJudge, NetBlockMerge
from normalizer.classify import CLASSIFIED_HOOKS, Classified, OpenMeta, classify
from normalizer.correlate import END, Block, correlate, decisions, policy_events
from normalizer.decode import decode_one
from normalizer.escape import ESCAPE_HOOKS, EscapeWatch
from normalizer.faults import fault_notes
from normalizer.fsops import FS_HOOKS, UNTRACED_IO_HOOKS, fs_events
from normalizer.health import CaptureFacts, observation_health, privilege_note
from normalizer.kernel_lines import MEMO_ENTRIES, KernelLayer, KernelLines
from normalizer.order import process_order
from normalizer.paths import PathResolver, Resolved
from normalizer.redact import Redactor
from normalizer.sdk import ToolCall, sdk_layer
from normalizer.telemetry import is_telemetry
from normalizer.transient import Substitution, TransientNames
from normalizer.tree import Process, Thread, TreeBuilder, number_tree
from spool.format import Spool, SpoolTrailer

_encoder = msgspec.json.Encoder()
_msgpack = msgspec.msgpack.Encoder()
_classified = msgspec.msgpack.Decoder(list[Classified])
SPILL_EVERY = 50_000
"""Evidence events held in memory before they are spilled to disk."""

FILE_KINDS = frozenset({"openat", "file_blocked"})
BLOCK_KINDS = frozenset({"file_blocked", "connect_blocked"})
ENDPOINT_KINDS = frozenset({"connect", "connect_blocked", "event_6", "event_7"})
"""Kinds whose values are network endpoints: connects and datagram peers (sendto,
sendmsg), as upstream's surface builder (crates/assay-runner-core/src/kernel.rs:198-210)."""
EVIDENCE_HOOKS = CLASSIFIED_HOOKS | FS_HOOKS | ESCAPE_HOOKS
"""Hooks that can give evidence; the others (close, dup, exit, ...) only update state."""
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


class _Scan:
    """Stage A over the spool in ring order: attribute, resolve, judge, classify."""

    def __init__(self, spool: Spool) -> None:
        header = spool.header
        self.tree = TreeBuilder(header.control_pids, header.shim_pid)
        self.resolver = PathResolver(header.workdir, self.tree.thread_of)
        self.escapes = EscapeWatch(header.cgroup_path)
        self.untraced_io: Counter[str] = Counter()
        self.judge = FileBlockJudge(header.policy, header.uid, spool.dac)
        self.captured = 0
        self._records = spool.records

    def __iter__(self) -> Iterator[tuple[Thread, Classified]]:
        """Evidence candidates with their threads, in ring order.

        Ring order is causal: a task's creation record is written before the
        task runs, and a thread's records in its own syscall order, so path
        and process-tree state are always up to date when an event needs it.
        One loop calls each stage per record (no generator per stage: this
        is the normalizer's hot path, docs/benchmarks.md).
        """
        attribute, resolve, keep = self.tree.attribute_one, self.resolver.resolve, NetBlockMerge().keep
        order = 0
        for arrival, record in enumerate(self._records):
            item = attribute(decode_one(record, arrival))
            self.captured = arrival + 1
            if item is None:
                continue
            r = resolve(item)
            if not keep(r):
                continue
            if item.event.hook in EVIDENCE_HOOKS:
                for c in self._evidence(r, order):
                    yield item.thread, c
            order += 1

    def _evidence(self, r: Resolved, order: int) -> list[Classified]:
        hook = r.item.event.hook
        if hook in FS_HOOKS:
            if hook in UNTRACED_IO_HOOKS:
                self.untraced_io[HOOK_NAMES[hook]] += 1
            return list(fs_events(r, order))
        if hook in ESCAPE_HOOKS:
            c = self.escapes.classify(r, order)
        else:
            c = classify(r, order, self.judge.blocked_access(r))
        return [] if c is None else [c]

    def facts(self, trailer: SpoolTrailer, platform: str) -> CaptureFacts:
        return CaptureFacts(
            drops=trailer.drops,
            emitted=trailer.emitted,
            captured=self.captured,
            unattributed_events=self.tree.stats.unattributed_events,
            root_seen=self.tree.stats.root_seen,
            unresolved_paths=self.resolver.unresolved,
            platform=platform,
            unresolved_reopens=self.resolver.unresolved_reopens,
            cgroup_escapes=self.escapes.migrations,
            clone_into_cgroup=self.escapes.clone_into_cgroup,
            untracked_tasks=trailer.untracked_tasks,
            untraced_io=dict(self.untraced_io),
            truncated_paths=self.resolver.truncated,
            recovered=trailer.recovered is not None,
        )


class ThreadBuckets:
    """Evidence filed per thread in the thread's own order, spilled to disk past a limit.

    Canonical order needs the whole tree (numbers are known only at the
    end), so evidence waits here; spilling keeps memory flat however long
    the run was.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit or SPILL_EVERY
        self._memory: dict[Thread, list[Classified]] = {}
        self._chunks: dict[Thread, list[tuple[int, int]]] = {}
        self._held = 0
        self._spill = tempfile.TemporaryFile(prefix="assay-normalize-")  # noqa: SIM115 - closed by close()

    def add(self, thread: Thread, event: Classified) -> None:
        self._memory.setdefault(thread, []).append(event)
        self._held += 1
        if self._held >= self._limit:
            self._spill.seek(0, os.SEEK_END)
            for t, events in self._memory.items():
                data = _msgpack.encode(events)
                self._chunks.setdefault(t, []).append((self._spill.tell(), len(data)))
                self._spill.write(data)
            self._memory.clear()
            self._held = 0

    def events(self, thread: Thread) -> Iterator[Classified]:
        """A thread's evidence, in its own order."""
        for offset, size in self._chunks.get(thread, ()):
            self._spill.seek(offset)
            yield from _classified.decode(self._spill.read(size))
        yield from self._memory.get(thread, ())

    def close(self) -> None:
        self._spill.close()


def canonical(buckets: ThreadBuckets, processes: list[Process],
              names: Substitution) -> Iterator[tuple[Thread, Classified]]:
    """Every filed event by process number, then its first thread's own order, then the
    other threads' records by content (normalizer/order.py; `names` gives the canonical values)."""
    for proc in processes:
        yield from process_order([(t, buckets.events(t)) for t in proc.threads()], names.apply)


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
    scan = _Scan(spool)
    buckets = ThreadBuckets()
    transient = TransientNames()
    for thread, c in scan:
        transient.observe(thread, c)
        buckets.add(thread, c)
    processes = number_tree(scan.tree.root)
    names = transient.finish(_rank)
    out = [msgspec.structs.replace(c, process=t.process.number, thread_rank=t.rank)
           for t, c in canonical(buckets, processes, names)]
    buckets.close()
    return out, scan.facts(spool.trailer, spool.header.platform), scan.judge, names


def dac_questions(spool: Spool) -> list[tuple[str, str]]:
    """(access, path) pairs the runner must check as the command's user (sorted, unique)."""
    scan = _Scan(spool)
    for _ in scan:
        pass
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
        self._tails: dict[tuple[int, str, str | None, OpenMeta | None], bytes] = {}

    def add(self, pid: int, c: Classified) -> None:
        """Write `c`'s line for process `pid`; an event shape seen before costs one lookup."""
        tail = self._tails.get((c.event_type, c.kind, c.value, c.meta))
        if tail is None:
            tail = self._first(c)
        self.layer.write_line(self._lines.line(self.layer.count, pid, tail))
        if self._any_window and c.ts in self._windows:
            self.stamps.append(c.ts)
            if c.kind in BLOCK_KINDS:
                self.blocks.append(Block(c.ts, c.kind))

    def _first(self, c: Classified) -> bytes:
        """The line tail of an event shape not in the memo, with its value collected.

        The value is substituted (transient names), then redacted. A shape
        whose value redaction left alone is memoized (most: paths and
        endpoints repeat); one holding a secret never is, so each occurrence
        is redacted again and the per-rule tally stays a count of occurrences.
        The memo is emptied past `MEMO_ENTRIES`: memory stays flat.
        """
        value = c.value
        if value is not None:
            before = self._redactor.total
            value = self._redactor.redact(self._names.apply(value))
            clean = self._redactor.total == before
        else:
            clean = True
        tail = self._lines.tail(c, value)
        if clean:
            if len(self._tails) >= MEMO_ENTRIES:
                self._tails.clear()
            self._tails[(c.event_type, c.kind, c.value, c.meta)] = tail
        self.kinds.add(c.kind)
        if value is None:
            return tail
        if c.kind in FILE_KINDS:
            self.values["files"].add(value)
            if c.kind == "openat" and c.meta and c.meta.status is None \
                    and c.meta.access_mode in ("write", "read_write"):
                self.values["written"].add(value)
        elif c.kind in ENDPOINT_KINDS:
            self.values["endpoints"].add(value)
        elif c.kind == "exec":
            self.values["execs"].add(value)
        if c.kind in BLOCK_KINDS:
            self.values["blocked"].add(value)
        return tail

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

    scan: _Scan
    buckets: ThreadBuckets
    transient: TransientNames


def scan(spool: Spool) -> Scanned:
    """Stage A over `spool.records` (iterated once, in ring order)."""
    scanned = Scanned(_Scan(spool), ThreadBuckets(), TransientNames())
    transient, buckets = scanned.transient, scanned.buckets
    for thread, c in scanned.scan:
        transient.observe(thread, c)
        if not is_telemetry(c):
            buckets.add(thread, c)
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
    for thread, c in canonical(buckets, processes, names):
        out.add(thread.process.number, c)
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
