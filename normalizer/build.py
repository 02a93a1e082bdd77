"""The normalizer pipeline: a spool in, the archive's members out.

Stage A streams the spool in ring order: decode -> attribute to the process
tree -> resolve paths -> merge network blocks -> judge file blocks ->
classify -> drop telemetry -> file the evidence under its thread. Stage B
numbers the tree and writes the kernel layer in canonical order (process
number, then the first thread's own syscall order, then the other threads'
records by content, normalizer/order.py: never arrival order across CPUs),
gathering what the other members need (normalizer/collector.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import msgspec

from normalizer.artifacts import (
    RUN_EVENT_SCHEMA,
    CorrelationReport,
    KernelEvent,
    ObservationHealth,
    PolicyEvent,
    RunEvent,
    SdkEvent,
    json_member,
)
from normalizer.blocks import FileBlockJudge
from normalizer.buckets import Run, Spilled, ThreadBuckets, shape_of
from normalizer.classify import Classified
from normalizer.collector import Collector, Prepared
from normalizer.correlate import correlate, decisions, policy_events
from normalizer.faults import fault_notes
from normalizer.health import CaptureFacts, observation_health, privilege_note
from normalizer.kernel_lines import KernelLayer
from normalizer.order import other_threads_order
from normalizer.redact import Redactor
from normalizer.refusals import refusal_notes
from normalizer.scan import Scan
from normalizer.sdk import sdk_layer
from normalizer.surface import SurfaceFile, SurfacePreview, write_surface
from normalizer.transient import Substitution, TransientNames
from normalizer.tree import Process, Thread, number_tree
from spool.format import Spool

_encoder = msgspec.json.Encoder()
SPILL_EVERY = 1 << 14
"""Evidence events held in memory before they are spilled to disk."""
PREPARE = True
"""Stage A prepares spilled chunks for stage B (`Prepared`; tests turn it off to compare)."""

RUN_PHASES = ("run_started", "run_finished")
"""The markers `events.ndjson` carries: upstream's run event types (run.rs:166-209)."""


@dataclass(frozen=True)
class NormalizedRun:
    """Everything the archive and the human summary need."""

    run_id: str
    kernel: KernelLayer
    health: ObservationHealth
    surface: SurfaceFile
    """`capability-surface.json`, streamed to a file (normalizer/surface.py; `decoded()` reads it)."""
    correlation: CorrelationReport
    phases: list[RunEvent]
    preview: SurfacePreview
    """What the human summary shows: counts and the first few values of the surface's sets, of the
    files the command opened for writing (successfully) and of the paths and endpoints the policy
    denied."""
    policy_events: list[PolicyEvent] = field(default_factory=list)
    sdk_events: list[SdkEvent] = field(default_factory=list)

    @property
    def kernel_events(self) -> list[KernelEvent]:
        """The kernel layer decoded (reads it back: for tests and small runs)."""
        return self.kernel.events()

    def members(self) -> dict[str, bytes | KernelLayer | SurfaceFile]:
        """Archive members (all but the manifest); the kernel layer and the surface stay streams."""
        return {
            "capability-surface.json": self.surface,
            "correlation-report.json": json_member(self.correlation),
            "events.ndjson": ndjson_member(self.phases),
            "layers/kernel.ndjson": self.kernel,
            "layers/policy.ndjson": ndjson_member(self.policy_events),
            "layers/sdk.ndjson": ndjson_member(self.sdk_events),
            "observation-health.json": json_member(self.health),
        }


def ndjson_member(items: Sequence[msgspec.Struct]) -> bytes:
    """One compact JSON object per line."""
    return b"".join(_encoder.encode(i) + b"\n" for i in items)


def canonical_runs(buckets: ThreadBuckets, processes: list[Process],
                   names: Substitution) -> Iterator[tuple[Thread, Run | Spilled]]:
    """Every filed event by process number, then its first thread's own order (as it was
    filed, chunk by chunk: `Spilled.run()` reads a spilled one), then the other threads'
    records by content (normalizer/order.py; `names` gives the canonical values), consecutive
    events of one thread as one run."""
    for proc in processes:
        first, *others = proc.threads()
        for piece in buckets.pieces(first):
            yield first, piece
        if not others:
            continue
        current: Thread | None = None
        shapes: list[Classified] = []
        pairs: list[int] = []
        for thread, c in other_threads_order([(t, buckets.events(t)) for t in others], names.apply):
            if thread is not current and current is not None and shapes:
                yield current, (shapes, pairs)
                shapes, pairs = [], []
            current = thread
            shapes.append(shape_of(c))
            pairs.append(c.order)
            pairs.append(c.ts)
        if current is not None and shapes:  # shapes only once there is a current thread
            yield current, (shapes, pairs)


def _rank(thread: Hashable) -> tuple[int, int]:
    """A thread's canonical position: (process number, thread rank; 0 is the first thread).

    TransientNames keeps whoever made a name as any hashable; the scan gives it threads."""
    assert isinstance(thread, Thread)
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
           for t, piece in canonical_runs(buckets, processes, names)
           for shapes, pairs in [piece.run() if isinstance(piece, Spilled) else piece]
           for i, shape in enumerate(shapes)]
    buckets.close()
    return out, scan.facts(spool.trailer, spool.header.platform), scan.judge, names


def dac_questions(spool: Spool) -> list[tuple[str, str]]:
    """(access, path) pairs the runner must check as the command's user (sorted, unique)."""
    scan = Scan(spool)
    buckets = ThreadBuckets(SPILL_EVERY)
    scan.file(buckets, TransientNames(), drop_telemetry=True)
    buckets.close()
    return scan.judge.questions()


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
    prepared: Prepared | None = None
    """What stage A worked out ahead for the spilled chunks (`Prepared`)."""


def scan(spool: Spool) -> Scanned:
    """Stage A over `spool.records` (walked once, in ring order)."""
    prepared = Prepared(spool.header.run_id) if PREPARE else None
    scanned = Scanned(Scan(spool), ThreadBuckets(SPILL_EVERY, prepared), TransientNames(), prepared)
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
    out = Collector(run_id, sdk.tool_calls, redactor, names)
    if scanned.prepared is not None and not names.count:
        out.adopt(scanned.prepared)
    elif scanned.prepared is not None:
        scanned.prepared.values.close()  # not used: what it spilled goes now
    buckets = scanned.buckets
    for thread, piece in canonical_runs(buckets, processes, names):
        out.add(thread.process.number, piece)
    out.layer.end()  # its worker finishes the sweep, digest and deflate while the members are made
    buckets.close()
    facts = scanned.scan.facts(spool.trailer, spool.header.platform)

    decided = decisions(sdk.tool_calls, out.blocks)
    policy_lines = policy_events(decided, run_id)
    markers = [p for p in spool.phases if p.name in RUN_PHASES]
    # the markers' names are the RUN_PHASES a RunEvent's type may be
    phases = [RunEvent(schema=RUN_EVENT_SCHEMA, run_id=run_id, seq=i, type=p.name)  # type: ignore[arg-type]
              for i, p in enumerate(markers)]
    notes = [n for n in (sdk.note, privilege_note(spool.header.uid, spool.header.policy)) if n]
    notes += fault_notes(spool.trailer) + refusal_notes(spool.trailer)
    if policy_lines:
        notes.append(f"s4_policy_capture: decision_events={len(policy_lines)}")  # policy.rs:183-186
    notes.append(redactor.note())
    if (note := names.note()) is not None:
        notes.append(note)
    surface, preview = write_surface(out.values, run_id, sorted({p.tool for p in policy_lines}),
                                     sorted({f"{p.decision}:{p.tool}" for p in policy_lines}))
    out.values.close()
    return NormalizedRun(
        run_id=run_id,
        kernel=out.layer,
        health=observation_health(
            run_id, out.kinds, out.layer.count, facts, extra_notes=notes,
            policy_layer="present" if policy_lines else "absent", sdk_layer=sdk.status),
        surface=surface,
        correlation=correlate(sdk.tool_calls, decided, out.stamps, sdk.sdk_events, out.layer.count, run_id),
        phases=phases,
        policy_events=policy_lines,
        sdk_events=sdk.sdk_events,
        preview=preview,
    )
