"""Rules inside one JSON document: health, surface, correlation, each from Assay at base.UPSTREAM.

Types, enums and required fields are the Structs' (normalizer/artifacts.py,
mirroring crates/assay-runner-schema/src/{health,surface,correlation}.rs);
what serde cannot express is here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise

from normalizer.artifacts import CapabilitySurface, CorrelationReport, ObservationHealth

NOTE = re.compile(r"[a-z0-9_]+: ")
"""A note is `code: message` (docs/reference/runner/artifacts-v0.md:223-228)."""
SCOPE_FOR_COVERAGE = {
    "unknown": "unknown",
    "absent": "not_applicable",
    "connect_only": "diagnostic_only",
    "datagram_peer_observed": "diagnostic_only",
    "connect_and_datagram_peer_observed": "diagnostic_only",
}
"""crates/assay-runner-core/src/kernel/health.rs:27-39."""
SURFACE_SETS = ("filesystem_paths", "network_endpoints", "process_execs", "mcp_tools", "policy_decisions")


def sorted_set_problem(values: list[str]) -> str | None:
    """Why `values` is not a strictly sorted set (code point order, as a BTreeSet), or None."""
    for prev, cur in pairwise(values):
        if cur == prev:
            return f"has duplicate {cur!r}"
        if cur < prev:
            return f"is not sorted: {cur!r} after {prev!r}"
    return None


def health_rules(h: ObservationHealth) -> Iterator[str]:
    """ObservationHealth::validate (health.rs:231-260) and the contract's notes and coverage rules."""
    if h.ringbuf_drops > 0 and h.kernel_layer != "partial_ringbuf_drops":
        yield (f"ringbuf_drops {h.ringbuf_drops} requires kernel_layer 'partial_ringbuf_drops' "
               f"(got {h.kernel_layer!r})")
    if h.kernel_layer == "partial_ringbuf_drops" and h.ringbuf_drops == 0:
        yield "kernel_layer 'partial_ringbuf_drops' requires ringbuf_drops > 0 (got 0)"
    if h.platform != "linux" and h.kernel_layer != "absent":
        yield f"platform {h.platform!r} requires kernel_layer 'absent' (got {h.kernel_layer!r})"
    if h.cgroup_correlation == "failed":
        yield "cgroup_correlation 'failed' is refused by Assay (health.rs:231-248)"
    scope = SCOPE_FOR_COVERAGE[h.network_protocol_coverage]
    if h.network_endpoint_claim_scope != scope:
        yield (f"network_protocol_coverage {h.network_protocol_coverage!r} requires "
               f"network_endpoint_claim_scope {scope!r} (got {h.network_endpoint_claim_scope!r})")
    if h.kernel_layer == "absent" and h.network_protocol_coverage != "absent":  # kernel.rs:306-310
        yield (f"kernel_layer 'absent' requires network_protocol_coverage 'absent' "
               f"(got {h.network_protocol_coverage!r})")
    for i, note in enumerate(h.notes):
        if not NOTE.match(note):
            yield f"notes[{i}] {note[:40]!r} has no `code: ` prefix"


def surface_rules(s: CapabilitySurface) -> Iterator[str]:
    """Every set is a BTreeSet upstream (surface.rs:15-19): strictly sorted, no duplicates."""
    for name in SURFACE_SETS:
        problem = sorted_set_problem(getattr(s, name))
        if problem:
            yield f"{name} {problem}"


def correlation_rules(c: CorrelationReport) -> Iterator[str]:
    """Status versus ambiguities (correlation.rs:48-73) and stable binding ids
    (scripts/ci/assay_runner_capability_diff_validate.py:89-106)."""
    if c.status == "clean" and c.ambiguities:
        yield f"status 'clean' requires no ambiguities (got {len(c.ambiguities)})"
    if c.status != "clean" and not c.ambiguities:
        yield f"status {c.status!r} requires at least one ambiguity"
    duplicates = sorted(i for i, n in Counter(b.tool_call_id for b in c.bindings).items() if n > 1)
    if duplicates:
        yield f"bindings repeat tool_call_id {duplicates[:3]}: the capability diff refuses the report"
