"""Rules for the policy, SDK and run-event lines, and how they bind the other members.

Each from Assay at base.UPSTREAM. Per line, the Structs (PolicyEvent,
SdkEvent, RunEvent in normalizer/artifacts.py) already hold upstream's
types, required fields and non-blank strings; `seq` runs 0..n-1 in every
layer (checked by the validator's line loop: policy.rs:112, sdk.rs:105-113,
run.rs:166-209).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice, zip_longest
from typing import Any

from normalizer.artifacts import CapabilitySurface, CorrelationReport, ObservationHealth, SdkEvent
from runner.evidence.conformance.base import (
    CORRELATION,
    HEALTH,
    KERNEL,
    POLICY,
    SDK,
    SURFACE,
    Parsed,
    Problem,
)

TOOL_CALL_TYPES = ("tool_call_started", "tool_call_completed")


def sdk_line_rules(e: SdkEvent) -> Iterator[str]:
    """Tool-call lines name their call and tool (sdk.rs:236-260)."""
    if e.event_type in TOOL_CALL_TYPES:
        for name in ("tool_call_id", "tool"):
            if not isinstance(getattr(e, name), str):
                yield f"event_type {e.event_type} requires {name}"


def _layer_problems(health: ObservationHealth, policy: list[Any] | None,
                    sdk: list[Any] | None) -> Iterator[Problem]:
    """policy_layer is present iff there are policy lines (policy.rs:176-178);
    sdk_layer is absent iff there are no SDK lines (sdk.rs:169-170)."""
    if policy is not None:
        want = "present" if policy else "absent"
        if health.policy_layer != want:
            yield Problem(HEALTH,
                          f"policy_layer {health.policy_layer!r} but {POLICY} has {len(policy)} lines")
    if sdk is not None and (health.sdk_layer == "absent") == bool(sdk):
        yield Problem(HEALTH, f"sdk_layer {health.sdk_layer!r} but {SDK} has {len(sdk)} lines")


def _differs(stored: Iterable[str], derived: list[str]) -> bool:
    """`stored` (a surface list, possibly streamed: never held) is not exactly `derived`."""
    return any(a != b for a, b in zip_longest(stored, derived))


def _odd(stored: Iterable[str], derived: list[str]) -> list[str]:
    """The two smallest values in one of `stored` and `derived` but not the other (one pass over
    `stored`, holding no more of it than `derived` has)."""
    wanted, found = set(derived), set()
    smallest: list[str] = []
    for value in stored:
        if value in wanted:
            found.add(value)
        elif value not in smallest:
            smallest = sorted([*smallest, value])[:2]
    return sorted([*smallest, *wanted - found])[:2]


def _surface_policy_problems(surface: CapabilitySurface, policy: list[Any]) -> Iterator[Problem]:
    """mcp_tools and policy_decisions come from the policy lines: `tool` and `{decision}:{tool}`
    (policy.rs:106-107). The surface's lists may be streamed, so they are only iterated."""
    tools = sorted({e.tool for _, e in policy})
    decisions = sorted({f"{e.decision}:{e.tool}" for _, e in policy})
    if _differs(surface.mcp_tools, tools):
        yield Problem(SURFACE, f"mcp_tools {list(islice(surface.mcp_tools, 4))} are not the policy lines' "
                      f"tools {tools[:4]}")
    if _differs(surface.policy_decisions, decisions):
        yield Problem(SURFACE, "policy_decisions are not `{decision}:{tool}` of the policy lines "
                      f"(e.g. {_odd(surface.policy_decisions, decisions)})")


def _binding_problems(report: CorrelationReport, policy: list[Any], kernel: int | None,
                      sdk: list[Any] | None) -> Iterator[Problem]:
    """One binding per policy line, same tool_call_id and decision, in order (policy.rs:206-217);
    a run-wide window counts every kernel line and no kernel lines is an ambiguity (policy.rs:188-197);
    cgroup_id only for a single decision (policy.rs:199-204); an SDK call without a binding is an
    ambiguity (sdk.rs:269-291). `kernel` is the number of kernel lines, None when they did not decode."""
    want = [(e.tool_call_id, e.decision) for _, e in policy]
    got = [(b.tool_call_id, b.policy_decision) for b in report.bindings]
    if got != want:
        missing = [w for w in want if w not in got][:3]
        extra = [g for g in got if g not in want][:3]
        yield Problem(CORRELATION, f"{len(got)} bindings for {len(policy)} policy lines: lines without their "
                      f"binding {missing}, bindings without their line {extra}")
    if kernel is not None:
        for i, b in enumerate(report.bindings):
            if (b.window.start, b.window.end) == ("run_started", "run_finished") \
                    and b.kernel_event_count != kernel:
                yield Problem(CORRELATION, f"bindings[{i}] spans the run but counts {b.kernel_event_count} "
                              f"kernel events, {KERNEL} has {kernel}")
        if policy and not kernel and "policy_events_without_kernel_events" not in report.ambiguities:
            yield Problem(CORRELATION, "policy lines without kernel lines need ambiguity "
                          "'policy_events_without_kernel_events'")
    with_cgroup = [i for i, b in enumerate(report.bindings) if isinstance(b.cgroup_id, int)]
    if with_cgroup and len(policy) != 1:
        yield Problem(CORRELATION,
                      f"bindings {with_cgroup[:3]} carry cgroup_id with {len(policy)} policy lines")
    if policy and sdk is not None:
        bound = {b.tool_call_id for b in report.bindings}
        for call_id in sorted({e.tool_call_id for _, e in sdk if isinstance(e.tool_call_id, str)} - bound):
            if f"sdk_tool_call_without_policy_binding:{call_id}" not in report.ambiguities:
                yield Problem(CORRELATION, f"SDK tool_call_id {call_id!r} has no binding and no "
                              f"'sdk_tool_call_without_policy_binding:{call_id}' ambiguity")


def _sdk_meta_problems(sdk: list[Any]) -> Iterator[Problem]:
    """One (sdk_name, sdk_version) pair per archive
    (scripts/ci/assay_runner_cross_runtime_diff_validate.py:220-262)."""
    pairs = sorted({(e.sdk_name, e.sdk_version) for _, e in sdk
                    if isinstance(e.sdk_name, str) and isinstance(e.sdk_version, str)})
    if len(pairs) > 1:
        yield Problem(SDK, f"lines name {len(pairs)} (sdk_name, sdk_version) pairs: {pairs[:2]}")


def cross_problems(parsed: Parsed) -> Iterator[Problem]:
    """The policy and SDK layers against health, surface and correlation (only members that decoded)."""
    docs, lines = parsed.documents, parsed.lines
    policy = lines[POLICY] if parsed.whole(POLICY) else None
    sdk = lines[SDK] if parsed.whole(SDK) else None
    kernel = parsed.kernel.count if parsed.whole(KERNEL) else None
    if parsed.whole(HEALTH):
        yield from _layer_problems(docs[HEALTH], policy, sdk)
    if policy is not None and parsed.whole(SURFACE):
        yield from _surface_policy_problems(docs[SURFACE], policy)
    if policy is not None and parsed.whole(CORRELATION):
        yield from _binding_problems(docs[CORRELATION], policy, kernel, sdk)
    if sdk is not None:
        yield from _sdk_meta_problems(sdk)
