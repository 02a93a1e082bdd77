"""The normalizer pipeline: a spool in, the archive's members out.

decode -> time order -> attribute to the process tree -> resolve paths ->
number the tree -> classify -> drop telemetry -> canonical order + seq ->
artifacts. Canonical order is by process number, then thread rank, then the
thread's own syscall order: never arrival order across CPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from normalizer.artifacts import (
    CORRELATION_SCHEMA,
    KERNEL_EVENT_SCHEMA,
    PHASE_EVENT_SCHEMA,
    SURFACE_SCHEMA,
    CapabilitySurface,
    CorrelationReport,
    KernelEvent,
    ObservationHealth,
    PhaseEvent,
)
from normalizer.blocks import merge_net_blocks
from normalizer.classify import Classified, classify
from normalizer.decode import decode, in_time_order
from normalizer.health import CaptureFacts, observation_health
from normalizer.paths import PathResolver
from normalizer.spool import Spool
from normalizer.telemetry import is_telemetry
from normalizer.tree import TreeBuilder, number_tree

_encoder = msgspec.json.Encoder()

FILE_KINDS = frozenset({"openat", "file_blocked"})
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

    def members(self) -> dict[str, bytes]:
        """Archive members (all but the manifest) as deterministic bytes."""
        return {
            "capability-surface.json": json_member(self.surface),
            "correlation-report.json": json_member(self.correlation),
            "events.ndjson": ndjson_member(self.phases),
            "layers/kernel.ndjson": ndjson_member(self.kernel_events),
            "layers/policy.ndjson": b"",
            "layers/sdk.ndjson": b"",
            "observation-health.json": json_member(self.health),
        }


def json_member(obj: msgspec.Struct) -> bytes:
    """Compact JSON, fixed key order, one trailing newline."""
    return _encoder.encode(obj) + b"\n"


def ndjson_member(items: list[msgspec.Struct]) -> bytes:
    """One compact JSON object per line."""
    return b"".join(_encoder.encode(i) + b"\n" for i in items)


def candidates(spool: Spool) -> tuple[list[Classified], CaptureFacts]:
    """All evidence candidates in canonical order, and the capture's facts."""
    events = in_time_order(decode(spool.records))
    tree = TreeBuilder(spool.header.control_pids, spool.header.shim_pid)
    resolver = PathResolver(spool.header.workdir)
    resolved = merge_net_blocks([resolver.resolve(item) for item in tree.attribute(events)])
    number_tree(tree.root)
    classified = [c for i, r in enumerate(resolved) if (c := classify(r, i)) is not None]
    classified.sort(key=lambda c: (c.process, c.thread_rank, c.order))
    facts = CaptureFacts(
        drops=spool.trailer.drops,
        emitted=spool.trailer.emitted,
        captured=len(spool.records),
        unattributed_events=tree.stats.unattributed_events,
        root_seen=tree.stats.root_seen,
        unresolved_paths=resolver.unresolved,
        platform=spool.header.platform,
    )
    return classified, facts


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


def normalize(spool: Spool, run_id: str | None = None) -> NormalizedRun:
    """Normalize a complete spool; `run_id` overrides the spool's own."""
    run_id = run_id or spool.header.run_id
    classified, facts = candidates(spool)
    evidence = [c for c in classified if not is_telemetry(c)]
    kernel = [kernel_event(run_id, seq, c) for seq, c in enumerate(evidence)]
    phases = [
        PhaseEvent(schema=PHASE_EVENT_SCHEMA, run_id=run_id, seq=i, phase=p.name)
        for i, p in enumerate(sorted(spool.phases, key=lambda p: p.ts))
    ]
    return NormalizedRun(
        run_id=run_id,
        kernel_events=kernel,
        health=observation_health(run_id, kernel, facts, extra_notes=[]),
        surface=capability_surface(run_id, kernel),
        correlation=CorrelationReport(
            schema=CORRELATION_SCHEMA, run_id=run_id, status="clean", bindings=[], ambiguities=[]
        ),
        phases=phases,
    )
