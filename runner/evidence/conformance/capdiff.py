"""Assay's capability-diff acceptance rule for a pair of archives.

scripts/ci/assay_runner_capability_diff_validate.py at base.UPSTREAM:
bindings are keyed by a non-empty, unique tool_call_id (lines 89-106); the
policy outcome of a binding id both runs share is compared (lines 183-194);
and when the binding ids are the same but the `policy_decisions` surface
changed, some shared binding must show the change (lines 256-268), else the
pair is refused ("policy surface changed for stable binding ids without
policy_outcomes.changed").
"""

from __future__ import annotations

from normalizer.artifacts import CapabilitySurface, CorrelationReport


def _binding_map(report: CorrelationReport, side: str) -> tuple[dict[str, str | None], list[str]]:
    out: dict[str, str | None] = {}
    problems = []
    for i, b in enumerate(report.bindings):
        if not b.tool_call_id:
            problems.append(f"{side}: correlation binding {i} lacks stable tool_call_id")
        elif b.tool_call_id in out:
            problems.append(f"{side}: duplicate tool_call_id: {b.tool_call_id}")
        out[b.tool_call_id] = b.policy_decision
    return out, problems


def capability_diff_problems(base: tuple[CapabilitySurface, CorrelationReport],
                             head: tuple[CapabilitySurface, CorrelationReport]) -> list[str]:
    """Why Assay's capability diff would refuse the pair (base, head); [] when it accepts it."""
    base_map, problems = _binding_map(base[1], "base")
    head_map, more = _binding_map(head[1], "head")
    problems += more
    changed = [i for i in sorted(base_map.keys() & head_map.keys()) if base_map[i] != head_map[i]]
    surface_changed = set(base[0].policy_decisions) != set(head[0].policy_decisions)
    if base_map.keys() == head_map.keys() and surface_changed and not changed:
        problems.append("policy surface changed for stable binding ids without policy_outcomes.changed")
    return problems
