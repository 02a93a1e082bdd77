"""SDK layer, tool decisions and correlation on synthetic messages and evidence (pure).

Runner-clock stamps are small integers here. These pin upstream's shapes
(one policy line per decided call, one binding per policy line, same id and
decision) and the contract's rule: windows come from runner markers only,
never from order, and anything that cannot be bound exactly is a sorted,
stable ambiguity code that makes the report `partial`.
"""

from __future__ import annotations

import random

import msgspec

from normalizer.artifacts import CorrelationReport, PolicyEvent, SdkEvent, json_member
from normalizer.correlate import Block, correlate, decisions, policy_events, sole_call_blocks
from normalizer.redact import Redactor
from normalizer.sdk import ToolCall, sdk_layer
from spool.format import SdkMessage

RUN = "run_t"


def hello(ts: int, name: str = "openai-agents", version: str = "0.24.0") -> SdkMessage:
    return SdkMessage(ts=ts, event="sdk_hello", sdk_name=name, sdk_version=version)


def started(ts: int, tool: str, call_id: str | None, decision: str | None = "allow") -> SdkMessage:
    rule = None if decision is None else f"tools.{decision}"
    return SdkMessage(
        ts=ts, event="tool_call_started", tool=tool, tool_call_id=call_id, decision=decision, rule=rule
    )


def finished(ts: int, tool: str, call_id: str | None, status: str = "ok") -> SdkMessage:
    return SdkMessage(ts=ts, event="tool_call_finished", tool=tool, tool_call_id=call_id, status=status)


def layer(messages: list[SdkMessage]):
    return sdk_layer(messages, RUN, Redactor())


def report(messages: list[SdkMessage], stamps: tuple[int, ...] = (), blocks: tuple[Block, ...] = (),
           kernel_lines: int | None = None) -> tuple[CorrelationReport, list[PolicyEvent]]:
    sdk = layer(messages)
    decided = decisions(sdk.tool_calls, blocks)
    lines = len(stamps) if kernel_lines is None else kernel_lines
    return correlate(sdk.tool_calls, decided, stamps, sdk.sdk_events, lines, RUN), policy_events(decided, RUN)


FIVE_CALLS = [
    hello(1),
    started(10, "read_file", "tc_001"), finished(20, "read_file", "tc_001"),
    started(30, "write_file", "tc_002"), finished(40, "write_file", "tc_002"),
    started(50, "write_file", "tc_003"), finished(60, "write_file", "tc_003", "error"),
    started(70, "connect", "tc_004"), finished(80, "connect", "tc_004", "error"),
    started(90, "shell", "tc_005", "deny"), finished(91, "shell", "tc_005", "denied"),
]
BLOCKS = (Block(55, "file_blocked"), Block(75, "connect_blocked"))


def test_sdk_lines_are_upstream_sdk_layer_events() -> None:
    sdk = layer(FIVE_CALLS)
    assert (sdk.status, sdk.note) == ("self_reported", "s5_sdk_capture: sdk_events=10 sdk_tool_calls=5")
    assert [e.seq for e in sdk.sdk_events] == list(range(10))
    first = msgspec.to_builtins(sdk.sdk_events[0])
    assert first == {"schema": "assay.runner.sdk_event.v0", "run_id": RUN, "seq": 0,
                     "event_type": "tool_call_started", "source": "openai-agents",
                     "sdk_name": "openai-agents", "sdk_version": "0.24.0",
                     "tool_call_id": "tc_001", "tool": "read_file"}
    assert [e.event_type for e in sdk.sdk_events[4:6]] == ["tool_call_started", "tool_call_completed"]


def test_lines_before_the_hello_name_the_channel_and_a_second_hello_changes_nothing() -> None:
    messages = [started(1, "t", "a"), hello(5), finished(6, "t", "a"), hello(7, "other", "9"),
                started(8, "t", "b")]
    lines = layer(messages).sdk_events
    assert [(e.source, e.sdk_name, e.sdk_version) for e in lines] == [
        ("assay_sdk", msgspec.UNSET, msgspec.UNSET),
        ("openai-agents", "openai-agents", "0.24.0"),
        ("openai-agents", "openai-agents", "0.24.0"),
    ]


def test_hello_only_is_an_absent_layer() -> None:
    sdk = layer([hello(1)])
    assert (sdk.status, sdk.note, sdk.sdk_events) == ("absent", None, [])


def test_one_policy_line_and_one_binding_per_call_with_blocks_deciding_deny() -> None:
    r, lines = report(FIVE_CALLS, (5, 9, 10, 15, 20, 25, 31, 35, 39, 55, 75, 91, 95), BLOCKS)
    assert [(p.seq, p.tool_call_id, p.tool, p.decision, p.source) for p in lines] == [
        (0, "tc_001", "read_file", "allow", "assay-runner://policy/tools"),
        (1, "tc_002", "write_file", "allow", "assay-runner://policy/tools"),
        (2, "tc_003", "write_file", "deny", "assay-runner://policy/filesystem"),
        (3, "tc_004", "connect", "deny", "assay-runner://policy/network"),
        (4, "tc_005", "shell", "deny", "assay-runner://policy/tools"),
    ]
    assert (r.status, r.ambiguities) == ("clean", [])
    assert [(b.tool_call_id, b.policy_decision, b.kernel_event_count) for b in r.bindings] == [
        ("tc_001", "allow", 3), ("tc_002", "allow", 3), ("tc_003", "deny", 1),
        ("tc_004", "deny", 1), ("tc_005", "deny", 1),
    ]
    assert (r.bindings[0].window.start, r.bindings[0].window.end) == (
        "tool_call_started:tc_001", "tool_call_completed:tc_001")


def test_a_block_outside_every_window_decides_nothing() -> None:
    _, lines = report(FIVE_CALLS, (), (Block(25, "file_blocked"),))
    assert {p.decision for p in lines[:4]} == {"allow"}


def test_blocks_go_to_the_one_call_whose_window_holds_them() -> None:
    """The sweep agrees with the definition, on random windows (some unfinished) and blocks."""
    rng = random.Random(3)
    for _ in range(200):
        calls = []
        for i in range(rng.randint(0, 8)):
            start = rng.randint(0, 100)
            end = None if rng.random() < 0.2 else start + rng.randint(0, 30)
            calls.append(ToolCall(tool_call_id=f"c{i}", tool="t", started_ts=start, finished_ts=end,
                                  decision="allow", rule=None))
        blocks = [Block(rng.randint(0, 140), rng.choice(["file_blocked", "connect_blocked"]))
                  for _ in range(rng.randint(0, 8))]
        expected: dict[int, Block] = {}
        for block in sorted(blocks):
            inside = [i for i, c in enumerate(calls) if c.started_ts <= block.ts
                      and (c.finished_ts is None or block.ts <= c.finished_ts)]
            if len(inside) == 1:
                expected.setdefault(inside[0], block)
        assert sole_call_blocks(calls, blocks) == expected


def test_without_a_policy_there_are_no_decisions_and_no_bindings() -> None:
    messages = [started(10, "t", "tc_1", decision=None), finished(20, "t", "tc_1")]
    r, lines = report(messages, (15,))
    assert (lines, r.bindings, r.status, r.ambiguities) == ([], [], "clean", [])


def test_call_without_id_has_no_line_no_binding_and_is_never_paired_by_order() -> None:
    messages = [
        started(10, "read_file", None), finished(20, "read_file", None),
        started(30, "read_file", None), finished(40, "read_file", None),
        started(50, "shell", "tc_1"), finished(60, "shell", "tc_1"),
    ]
    r, lines = report(messages, (15, 35, 55))
    assert [p.tool_call_id for p in lines] == [b.tool_call_id for b in r.bindings] == ["tc_1"]
    assert r.status == "partial"
    assert r.ambiguities == ["tool_call_without_id:read_file", "tool_call_without_id:read_file"]
    assert [e.tool_call_id for e in layer(messages).sdk_events] == ["tc_1", "tc_1"]


def test_blank_tool_or_id_counts_as_missing() -> None:
    messages = [started(10, "  ", "tc_1"), finished(20, "  ", "tc_1"), started(30, "t", " ")]
    r, lines = report(messages, (15,))
    assert (lines, layer(messages).sdk_events) == ([], [])
    assert r.ambiguities == ["tool_call_without_id:t", "tool_call_without_tool:tc_1"]


def test_unfinished_call_is_bound_to_the_end_of_the_run() -> None:
    messages = [started(10, "t", "tc_1"), started(20, "t", "tc_2"), finished(30, "t", "tc_2")]
    r, _ = report(messages, (5, 25, 40))
    assert r.ambiguities == ["tool_call_unfinished:tc_1"]
    assert [(b.tool_call_id, b.window.end, b.kernel_event_count) for b in r.bindings] == [
        ("tc_1", "run_finished", 2), ("tc_2", "tool_call_completed:tc_2", 1)]


def test_duplicate_id_gets_one_decision_deny_if_any_call_was_denied() -> None:
    messages = [
        started(10, "t", "tc_1"), finished(20, "t", "tc_1"),
        started(30, "t", "tc_1", "deny"), finished(40, "t", "tc_1"),
    ]
    r, lines = report(messages, (15,))
    assert [(p.tool_call_id, p.decision) for p in lines] == [("tc_1", "deny")]
    assert [(b.tool_call_id, b.policy_decision, b.kernel_event_count) for b in r.bindings] == [
        ("tc_1", "deny", 1)]
    assert (r.status, r.ambiguities) == ("partial", ["duplicate_tool_call_id:tc_1"])


def test_overlapping_calls_sharing_evidence_cannot_be_separated() -> None:
    messages = [
        started(10, "a", "tc_b"), started(15, "b", "tc_a"),
        finished(20, "a", "tc_b"), finished(30, "b", "tc_a"),
    ]
    r, _ = report(messages, (12, 17, 25), (Block(17, "file_blocked"),))
    assert r.ambiguities == ["overlapping_tool_calls:tc_a,tc_b"]  # ids sorted inside the code
    # both windows still count what fell inside them (17 in both); the block decides neither
    assert [(b.tool_call_id, b.policy_decision, b.kernel_event_count) for b in r.bindings] == [
        ("tc_b", "allow", 2), ("tc_a", "allow", 2)]


def test_overlapping_calls_with_nothing_in_the_shared_part_stay_exact() -> None:
    messages = [started(10, "a", "x"), started(15, "b", "y"), finished(20, "a", "x"), finished(30, "b", "y")]
    r, _ = report(messages, (12, 25))
    assert (r.status, r.ambiguities) == ("clean", [])
    assert [(b.tool_call_id, b.kernel_event_count) for b in r.bindings] == [("x", 1), ("y", 1)]


def test_every_overlapping_pair_is_reported_once() -> None:
    messages = [
        started(10, "t", "c1"), started(11, "t", "c2"), started(12, "t", "c3"),
        finished(20, "t", "c1"), finished(21, "t", "c2"), finished(22, "t", "c3"),
        started(40, "t", "c4"), finished(50, "t", "c4"),
    ]
    r, _ = report(messages, (15, 45))
    assert r.ambiguities == [
        "overlapping_tool_calls:c1,c2", "overlapping_tool_calls:c1,c3", "overlapping_tool_calls:c2,c3",
    ]


def test_decisions_without_kernel_lines_are_upstream_partial() -> None:
    r, _ = report(FIVE_CALLS[:3], (), kernel_lines=0)
    assert (r.status, r.ambiguities) == ("partial", ["policy_events_without_kernel_events"])


def test_an_sdk_call_without_a_binding_is_upstream_partial() -> None:
    calls = layer([started(10, "t", "a"), finished(20, "t", "a"), started(30, "u", "b", None),
                   finished(40, "u", "b")])
    decided = decisions(calls.tool_calls, ())
    r = correlate(calls.tool_calls, decided, (15,), calls.sdk_events, 1, RUN)
    assert [b.tool_call_id for b in r.bindings] == ["a"]
    assert r.ambiguities == ["sdk_tool_call_without_policy_binding:b"]


def test_the_report_is_deterministic_whatever_the_evidence_order() -> None:
    messages = [
        hello(1),
        started(10, "zeta", None), finished(11, "zeta", None),
        started(20, "t", "tc_9"), finished(30, "t", "tc_9"),
        started(40, "t", "tc_2"),
        started(50, "alpha", None),
        started(60, "t", "tc_1"), finished(70, "t", "tc_1"),
    ]
    stamps = [12, 25, 45, 65, 66]
    expected, _ = report(messages, tuple(stamps))
    assert expected.ambiguities == sorted(expected.ambiguities)
    assert [b.tool_call_id for b in expected.bindings] == ["tc_9", "tc_2", "tc_1"]  # policy-line order
    rng = random.Random(7)
    for _ in range(20):
        rng.shuffle(stamps)  # evidence arrives in canonical, not time, order
        got, _ = report(messages, tuple(stamps))
        assert json_member(got) == json_member(expected)


def test_members_decode_with_the_upstream_structs() -> None:
    r, lines = report(FIVE_CALLS, (15,), BLOCKS)
    assert msgspec.json.decode(json_member(r), type=CorrelationReport) == r
    for p in lines:
        assert msgspec.json.decode(json_member(p), type=PolicyEvent) == p
    for e in layer(FIVE_CALLS).sdk_events:
        assert msgspec.json.decode(json_member(e), type=SdkEvent) == e
