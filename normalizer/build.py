"""The normalizer pipeline: a spool in, the archive's members out.

decode -> time order -> attribute to the process tree -> resolve paths ->
number the tree -> classify -> drop telemetry -> canonical order + seq ->
artifacts. Canonical order is by process number, then thread rank, then the
thread's own syscall order: never arrival order across CPUs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import msgspec

from normalizer.artifacts import (
    KERNEL_EVENT_SCHEMA,
    PHASE_EVENT_SCHEMA,
    POLICY_EVENT_SCHEMA,
    SURFACE_SCHEMA,
    CapabilitySurface,
    CorrelationReport,
    KernelEvent,
    ObservationHealth,
    PhaseEvent,
    PolicyEvent,
    SdkEvent,
)
from normalizer.blocks import FileBlockJudge, merge_net_blocks
from normalizer.classify import Classified, classify
from normalizer.correlate import correlate, window_markers
from normalizer.decode import decode, in_time_order
from normalizer.health import CaptureFacts, observation_health
from normalizer.paths import PathResolver
from normalizer.sdk import ToolCall, sdk_layer
from normalizer.spool import Spool
from normalizer.telemetry import is_telemetry
from normalizer.tree import TreeBuilder, number_tree
from runner.policy.model import decision_summary

_encoder = msgspec.json.Encoder()

FILE_KINDS = frozenset({"openat", "file_blocked"})
BLOCK_KINDS = frozenset({"file_blocked", "connect_blocked"})
ENDPOINT_KINDS = frozenset({"connect", "connect_blocked"})


@dataclass(frozen=True)
class NormalizedRun:
    """Everything the archive and the human summary need."""

    run_id: str
    kernel_events: list[KernelEvent]
    health: ObservationHealth
    surface: CapabilitySurface
    correlation: CorrelationReport
    phases: list[PhaseEvent]
    policy_events: list[PolicyEvent] = field(default_factory=list)
    sdk_events: list[SdkEvent] = field(default_factory=list)

    def members(self) -> dict[str, bytes]:
        """Archive members (all but the manifest) as deterministic bytes."""
        return {
            "capability-surface.json": json_member(self.surface),
            "correlation-report.json": json_member(self.correlation),
            "events.ndjson": ndjson_member(self.phases),
            "layers/kernel.ndjson": ndjson_member(self.kernel_events),
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


def candidates(spool: Spool) -> tuple[list[Classified], CaptureFacts, FileBlockJudge]:
    """All evidence candidates in canonical order, the capture's facts, and the block judge."""
    header = spool.header
    events = in_time_order(decode(spool.records))
    tree = TreeBuilder(header.control_pids, header.shim_pid)
    resolver = PathResolver(header.workdir)
    resolved = merge_net_blocks([resolver.resolve(item) for item in tree.attribute(events)])
    number_tree(tree.root)
    judge = FileBlockJudge(header.policy, header.uid, spool.dac)
    classified = []
    for i, r in enumerate(resolved):
        c = classify(r, i, judge.blocked_access(r))
        if c is not None:
            classified.append(c)
    classified.sort(key=lambda c: (c.process, c.thread_rank, c.order))
    facts = CaptureFacts(
        drops=spool.trailer.drops,
        emitted=spool.trailer.emitted,
        captured=len(spool.records),
        unattributed_events=tree.stats.unattributed_events,
        root_seen=tree.stats.root_seen,
        unresolved_paths=resolver.unresolved,
        platform=header.platform,
    )
    return classified, facts, judge


def dac_questions(spool: Spool) -> list[tuple[str, str]]:
    """(access, path) pairs the runner must check as the command's user (sorted, unique)."""
    _, _, judge = candidates(spool)
    return sorted(set(judge.unattributed))


def kernel_event(run_id: str, seq: int, c: Classified) -> KernelEvent:
    """The `layers/kernel.ndjson` line for one evidence event."""
    event = KernelEvent(
        schema=KERNEL_EVENT_SCHEMA,
        run_id=run_id,
        seq=seq,
        pid=c.process,
        event_type=c.event_type,
        kind=c.kind,
        value=c.value,
    )
    m = c.meta
    if m is not None:
        event.flags = m.flags
        if m.mode is not None:
            event.mode = m.mode
        if m.resolve is not None:
            event.resolve = m.resolve
        if m.return_value is not None:
            event.return_value = m.return_value
        event.access_mode = m.access_mode
        event.operation_flags = m.operation_flags
        event.status = m.status
    return event


def capability_surface(run_id: str, events: list[KernelEvent]) -> CapabilitySurface:
    """Sorted sets of what the run touched."""

    def values(kinds: frozenset[str]) -> list[str]:
        return sorted({e.value for e in events if e.kind in kinds and e.value is not None})

    return CapabilitySurface(
        schema=SURFACE_SCHEMA,
        run_id=run_id,
        filesystem_paths=values(FILE_KINDS),
        network_endpoints=values(ENDPOINT_KINDS),
        process_execs=values(frozenset({"exec"})),
        mcp_tools=[],
        policy_decisions=[],
    )


def block_policy_events(run_id: str, evidence: list[Classified],
                        calls: list[ToolCall]) -> list[PolicyEvent]:
    """Policy lines for file and network blocks, in kernel-layer order (seq set later)."""
    out = []
    for c in evidence:
        if c.kind not in BLOCK_KINDS or c.value is None or c.denied is None:
            continue
        source = "filesystem" if c.kind == "file_blocked" else "network"
        access = c.denied
        out.append(PolicyEvent(
            schema=POLICY_EVENT_SCHEMA, run_id=run_id, seq=0, source=source, decision="deny",
            target=c.value, access=access,
            rule=f"filesystem.{access}" if source == "filesystem" else "network.default",
            tool_call_id=enclosing_call(calls, c.ts),
            summary=decision_summary(source, "deny", c.value, access if source == "filesystem" else None),
        ))
    return out


def enclosing_call(calls: list[ToolCall], ts: int) -> str | None:
    """The id of the one finished tool call whose window holds `ts`, if exactly one does."""
    inside = [c.tool_call_id for c in calls
              if c.finished_ts is not None and c.started_ts <= ts <= c.finished_ts]
    return inside[0] if len(inside) == 1 else None


def normalize(spool: Spool, run_id: str | None = None) -> NormalizedRun:
    """Normalize a complete spool; `run_id` overrides the spool's own."""
    run_id = run_id or spool.header.run_id
    classified, facts, _ = candidates(spool)
    evidence = [c for c in classified if not is_telemetry(c)]
    kernel = [kernel_event(run_id, seq, c) for seq, c in enumerate(evidence)]
    sdk = sdk_layer(spool.sdk, run_id)
    policy_present = spool.header.policy is not None
    policy_events = [
        msgspec.structs.replace(p, seq=seq)
        for seq, p in enumerate(block_policy_events(run_id, evidence, sdk.tool_calls)
                                + sdk.tool_policy_events)
    ]
    markers = sorted([*spool.phases, *window_markers(sdk.tool_calls)], key=lambda p: p.ts)
    phases = [PhaseEvent(schema=PHASE_EVENT_SCHEMA, run_id=run_id, seq=i, phase=p.name)
              for i, p in enumerate(markers)]
    notes = [n for n in (sdk.note,) if n]
    if policy_present:
        blocks = Counter(c.kind for c in evidence if c.kind in BLOCK_KINDS)
        notes.append(f"s4_policy_capture: policy_events={len(policy_events)} "
                     f"file_blocked={blocks['file_blocked']} connect_blocked={blocks['connect_blocked']}")
    surface = capability_surface(run_id, kernel)
    surface.mcp_tools = sdk.mcp_tools
    surface.policy_decisions = sorted({p.summary for p in policy_events})
    return NormalizedRun(
        run_id=run_id,
        kernel_events=kernel,
        health=observation_health(
            run_id, kernel, facts, extra_notes=notes,
            policy_layer="present" if policy_present else "absent", sdk_layer=sdk.status),
        surface=surface,
        correlation=correlate(sdk.tool_calls, evidence, run_id, policy_present),
        phases=phases,
        policy_events=policy_events,
        sdk_events=sdk.sdk_events,
    )
