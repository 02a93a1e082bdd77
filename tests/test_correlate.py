"""SDK layer and tool-call correlation on synthetic messages and evidence (pure).

Runner-clock stamps are small integers here; evidence is `Classified` with a
`ts`. These pin the contract's rule: windows come from runner markers only,
never from order, and anything that cannot be bound exactly is a sorted,
stable ambiguity code that makes the report `partial`.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from normalizer.build import json_member
from normalizer.classify import Classified
from normalizer.correlate import correlate, window_markers
from normalizer.sdk import ToolCall, sdk_layer
from spool.format import SdkMessage

RUN = "run_t"


def hello(ts: int) -> SdkMessage:
    return SdkMessage(ts=ts, event="sdk_hello", sdk_name="openai-agents", sdk_version="0.24.0")


def started(ts: int, tool: str, call_id: str | None, decision: str | None = "allow") -> SdkMessage:
    rule = None if decision is None else f"tools.{decision}"
    return SdkMessage(
        ts=ts, event="tool_call_started", tool=tool, tool_call_id=call_id, decision=decision, rule=rule
    )


def finished(ts: int, tool: str, call_id: str | None, status: str = "ok") -> SdkMessage:
    return SdkMessage(ts=ts, event="tool_call_finished", tool=tool, tool_call_id=call_id, status=status)


def evidence(*stamps: int) -> list[Classified]:
    """Kernel evidence at the given runner-clock times (in canonical, not time, order)."""
    return [
        Classified(event_type=1, kind="openat", value=f"/f{i}", meta=None, process=1,
                   thread_rank=0, order=i, ts=ts)
        for i, ts in enumerate(stamps)
    ]


def report(messages: list[SdkMessage], stamps: tuple[int, ...] = (), policy: bool = True):
    return correlate(sdk_layer(messages, RUN).tool_calls, evidence(*stamps), RUN, policy)


FIVE_CALLS = [
    hello(1),
    started(10, "read_file", "tc_001"), finished(20, "read_file", "tc_001"),
    started(30, "write_file", "tc_002"), finished(40, "write_file", "tc_002"),
    started(50, "write_file", "tc_003"), finished(60, "write_file", "tc_003", "error"),
    started(70, "connect", "tc_004"), finished(80, "connect", "tc_004", "error"),
    started(90, "shell", "tc_005", "deny"), finished(91, "shell", "tc_005", "denied"),
]


def test_sdk_layer_lines_policy_events_tools_and_note() -> None:
    layer = sdk_layer(FIVE_CALLS, RUN)
    assert layer.status == "self_reported"
    assert layer.note == "s5_sdk_capture: sdk_events=11 sdk_tool_calls=5"
    assert layer.mcp_tools == ["connect", "read_file", "shell", "write_file"]
    assert [e.seq for e in layer.sdk_events] == list(range(11))
    assert {(e.sdk_name, e.sdk_version) for e in layer.sdk_events} == {("openai-agents", "0.24.0")}
    assert [(e.event, e.tool_call_id, e.status) for e in layer.sdk_events[5:7]] == [
        ("tool_call_started", "tc_003", None), ("tool_call_finished", "tc_003", "error"),
    ]
    assert [p.summary for p in layer.tool_policy_events] == [
        "allow:read_file", "allow:write_file", "allow:write_file", "allow:connect", "deny:shell",
    ]
    deny = layer.tool_policy_events[-1]
    assert (deny.source, deny.access, deny.target, deny.rule, deny.tool_call_id) == (
        "tool", "call", "shell", "tools.deny", "tc_005",
    )
    assert [c.status for c in layer.tool_calls] == ["ok", "ok", "error", "error", "denied"]


def test_sdk_layer_orders_by_receipt_stamp_and_names_the_runtime_from_the_last_hello() -> None:
    messages = [started(10, "t", "a"), hello(5), finished(12, "t", "a")]
    layer = sdk_layer(messages, RUN)
    assert [e.event for e in layer.sdk_events] == ["sdk_hello", "tool_call_started", "tool_call_finished"]
    early = sdk_layer([started(1, "t", "a"), hello(5)], RUN).sdk_events
    assert [(e.sdk_name, e.sdk_version) for e in early] == [("", ""), ("openai-agents", "0.24.0")]


def test_no_messages_is_an_absent_layer_and_a_clean_empty_report() -> None:
    layer = sdk_layer([], RUN)
    assert (layer.status, layer.note, layer.sdk_events, layer.mcp_tools) == ("absent", None, [], [])
    r = correlate(layer.tool_calls, evidence(1, 2, 3), RUN, policy_present=False)
    assert (r.status, r.bindings, r.ambiguities) == ("clean", [], [])


def test_windows_count_evidence_inclusively_between_the_runner_markers() -> None:
    # 5..9 before any call, 10 and 20 on the edges of tc_001, 25 between calls, 91 on tc_005's end
    r = report(FIVE_CALLS, (5, 9, 10, 15, 20, 25, 31, 35, 39, 55, 75, 91, 95))
    assert r.status == "clean" and r.ambiguities == []
    assert [(b.tool_call_id, b.policy_decision, b.kernel_event_count) for b in r.bindings] == [
        ("tc_001", "allow", 3),
        ("tc_002", "allow", 3),
        ("tc_003", "allow", 1),
        ("tc_004", "allow", 1),
        ("tc_005", "deny", 1),
    ]
    assert (r.bindings[0].window.start, r.bindings[0].window.end) == (
        "tool_call_started:tc_001", "tool_call_finished:tc_001",
    )


def test_window_markers_are_the_bindings_window_names_in_time_order() -> None:
    calls = sdk_layer(FIVE_CALLS, RUN).tool_calls
    markers = window_markers(calls)
    assert [m.ts for m in markers] == sorted(m.ts for m in markers)
    names = [m.name for m in markers]
    r = correlate(calls, [], RUN, True)
    for b in r.bindings:
        assert names.index(b.window.start) < names.index(b.window.end)
    assert names[:2] == ["tool_call_started:tc_001", "tool_call_finished:tc_001"]


def test_call_without_id_has_no_binding_and_is_never_paired_by_order() -> None:
    messages = [
        started(10, "read_file", None), finished(20, "read_file", None),
        started(30, "read_file", None), finished(40, "read_file", None),
        started(50, "shell", "tc_1"), finished(60, "shell", "tc_1"),
    ]
    r = report(messages, (15, 35, 55))
    assert r.status == "partial"
    assert [b.tool_call_id for b in r.bindings] == ["tc_1"]
    assert r.ambiguities == ["tool_call_without_id:read_file", "tool_call_without_id:read_file"]
    assert all(c.finished_ts is None for c in sdk_layer(messages, RUN).tool_calls[:2])
    assert [m.name for m in window_markers(sdk_layer(messages, RUN).tool_calls)] == [
        "tool_call_started:tc_1", "tool_call_finished:tc_1",
    ]


def test_unfinished_call_has_no_binding() -> None:
    r = report([started(10, "t", "tc_1"), started(20, "t", "tc_2"), finished(30, "t", "tc_2")], (25,))
    assert r.ambiguities == ["tool_call_unfinished:tc_1"]
    assert [b.tool_call_id for b in r.bindings] == ["tc_2"]


def test_duplicate_id_is_not_a_key() -> None:
    messages = [
        started(10, "t", "tc_1"), finished(20, "t", "tc_1"),
        started(30, "t", "tc_1"), finished(40, "t", "tc_1"),
    ]
    r = report(messages, (15,))
    assert (r.status, r.bindings, r.ambiguities) == ("partial", [], ["duplicate_tool_call_id:tc_1"])


def test_overlapping_calls_sharing_evidence_cannot_be_separated() -> None:
    messages = [
        started(10, "a", "tc_b"), started(15, "b", "tc_a"),
        finished(20, "a", "tc_b"), finished(30, "b", "tc_a"),
    ]
    r = report(messages, (12, 17, 25))
    assert r.status == "partial"
    assert r.ambiguities == ["overlapping_tool_calls:tc_a,tc_b"]  # ids sorted inside the code
    # both windows still count what fell inside them (17 in both)
    assert [(b.tool_call_id, b.kernel_event_count) for b in r.bindings] == [("tc_a", 2), ("tc_b", 2)]


def test_overlapping_calls_with_nothing_in_the_shared_part_stay_exact() -> None:
    messages = [started(10, "a", "x"), started(15, "b", "y"), finished(20, "a", "x"), finished(30, "b", "y")]
    r = report(messages, (12, 25))
    assert (r.status, r.ambiguities) == ("clean", [])
    assert [(b.tool_call_id, b.kernel_event_count) for b in r.bindings] == [("x", 1), ("y", 1)]


def test_every_overlapping_pair_is_reported_once() -> None:
    messages = [
        started(10, "t", "c1"), started(11, "t", "c2"), started(12, "t", "c3"),
        finished(20, "t", "c1"), finished(21, "t", "c2"), finished(22, "t", "c3"),
        started(40, "t", "c4"), finished(50, "t", "c4"),
    ]
    r = report(messages, (15, 45))
    assert r.ambiguities == [
        "overlapping_tool_calls:c1,c2", "overlapping_tool_calls:c1,c3", "overlapping_tool_calls:c2,c3",
    ]


def test_calls_without_policy_decisions_are_partial() -> None:
    messages = [started(10, "t", "tc_1", decision=None), finished(20, "t", "tc_1")]
    r = report(messages, (15,))
    assert r.ambiguities == ["tool_call_without_policy_decision:tc_1"]
    assert r.bindings[0].policy_decision is None and r.bindings[0].kernel_event_count == 1
    assert sdk_layer(messages, RUN).tool_policy_events == []
    # a run without a policy has no decisions even if messages carry one
    r = report(FIVE_CALLS[:3], (15,), policy=False)
    assert r.ambiguities == ["tool_call_without_policy_decision:tc_001"]
    assert r.bindings[0].policy_decision is None


def test_ambiguities_and_bindings_are_sorted_and_the_report_is_deterministic() -> None:
    messages = [
        hello(1),
        started(10, "zeta", None), finished(11, "zeta", None),
        started(20, "t", "tc_9", decision=None), finished(30, "t", "tc_9"),
        started(40, "t", "tc_2"),
        started(50, "alpha", None),
        started(60, "t", "tc_1"), finished(70, "t", "tc_1"),
    ]
    stamps = (12, 25, 45, 65, 66)
    expected = report(messages, stamps)
    assert expected.ambiguities == sorted(expected.ambiguities) == [
        "tool_call_unfinished:tc_2",
        "tool_call_without_id:alpha",
        "tool_call_without_id:zeta",
        "tool_call_without_policy_decision:tc_9",
    ]
    assert [b.tool_call_id for b in expected.bindings] == ["tc_1", "tc_9"]
    rng = random.Random(7)
    for _ in range(20):
        shuffled_ev = evidence(*stamps)
        rng.shuffle(shuffled_ev)  # evidence arrives in canonical, not time, order
        got = correlate(sdk_layer(messages, RUN).tool_calls, shuffled_ev, RUN, True)
        assert json_member(got) == json_member(expected)


def test_report_validates_against_the_contract_struct() -> None:
    from normalizer.artifacts import CorrelationReport

    r = report(FIVE_CALLS, (15,))
    assert msgspec.json.decode(json_member(r), type=CorrelationReport) == r


@pytest.mark.parametrize("policy_present", [True, False])
def test_a_bound_call_is_clean_only_under_a_policy(policy_present: bool) -> None:
    call = ToolCall(tool_call_id="a", tool="t", started_ts=1, finished_ts=3, decision="allow",
                    rule="r", status="ok")
    r = correlate([call], evidence(0, 1, 2, 3, 4), RUN, policy_present)
    assert r.bindings[0].kernel_event_count == 3
    assert (r.status == "clean") is policy_present
