"""The SDK layer: what the agent reported over the SDK channel, as contract lines.

Pure: stamped `SdkMessage`s in (the spool's `sdk` frames), the lines of
`layers/sdk.ndjson`, the tool decisions for `layers/policy.ndjson`, the
surface's `mcp_tools`, and the tool calls for correlation out. The layer
is `self_reported`: the agent's runtime says what it did; the runner only
stamps receipt times on its own clock and answers with its tool policy.

A call and its finish are paired by `tool_call_id` only. Calls without an id
are kept unpaired (pairing them by order would be exactly the fallback the
contract forbids); correlation reports them as ambiguities.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from normalizer.artifacts import POLICY_EVENT_SCHEMA, SDK_EVENT_SCHEMA, PolicyEvent, SdkEvent
from policy.model import decision_summary
from spool.format import SdkMessage

SdkLayerStatus = Literal["self_reported", "absent"]
TOOL_ACCESS = "call"


class ToolCall(msgspec.Struct, frozen=True):
    """One reported tool call with its runner-clock receipt stamps.

    `finished_ts` is None when no `tool_call_finished` with this id arrived
    (and always for id-less calls); `decision`/`rule` are None when the run
    had no tool policy.
    """

    tool_call_id: str | None
    tool: str
    started_ts: int
    finished_ts: int | None
    decision: str | None
    rule: str | None
    status: str | None
    """The agent's reported outcome: ok, error or denied."""


class SdkLayer(msgspec.Struct, frozen=True):
    """Everything the archive takes from the SDK channel."""

    status: SdkLayerStatus
    sdk_events: list[SdkEvent]
    tool_policy_events: list[PolicyEvent]
    """One per tool decision; `seq` counts from 0 here and is renumbered when merged."""
    mcp_tools: list[str]
    tool_calls: list[ToolCall]
    note: str | None
    """`s5_sdk_capture: ...` for observation-health notes; None when the layer is absent."""


def sdk_layer(messages: list[SdkMessage], run_id: str) -> SdkLayer:
    """Build the SDK layer from the run's stamped messages."""
    ordered = sorted(messages, key=lambda m: m.ts)  # stable: receipt order on equal stamps
    calls = tool_calls(ordered)
    decided = [c for c in calls if c.decision is not None]
    return SdkLayer(
        status="self_reported" if ordered else "absent",
        sdk_events=sdk_events(ordered, run_id),
        tool_policy_events=[tool_policy_event(run_id, seq, c) for seq, c in enumerate(decided)],
        mcp_tools=sorted({c.tool for c in calls}),
        tool_calls=calls,
        note=f"s5_sdk_capture: sdk_events={len(ordered)} sdk_tool_calls={len(calls)}" if ordered else None,
    )


def sdk_events(ordered: list[SdkMessage], run_id: str) -> list[SdkEvent]:
    """`layers/sdk.ndjson` lines in receipt order.

    Every line names the runtime from the latest `sdk_hello` before it
    (empty before any hello); the runner's stamps stay in the spool.
    """
    name = version = ""
    lines = []
    for seq, m in enumerate(ordered):
        if m.event == "sdk_hello":
            name, version = m.sdk_name, m.sdk_version
        lines.append(
            SdkEvent(
                schema=SDK_EVENT_SCHEMA,
                run_id=run_id,
                seq=seq,
                event=m.event,  # type: ignore[arg-type]  # validated by the SDK server
                sdk_name=name,
                sdk_version=version,
                tool=m.tool,
                tool_call_id=m.tool_call_id,
                status=m.status,
            )
        )
    return lines


def tool_calls(ordered: list[SdkMessage]) -> list[ToolCall]:
    """Tool calls in start order; a finish closes the open call with its id."""
    calls: list[ToolCall] = []
    open_by_id: dict[str, int] = {}
    for m in ordered:
        if m.event == "tool_call_started":
            calls.append(
                ToolCall(
                    tool_call_id=m.tool_call_id,
                    tool=m.tool or "",
                    started_ts=m.ts,
                    finished_ts=None,
                    decision=m.decision,
                    rule=m.rule,
                    status=None,
                )
            )
            if m.tool_call_id is not None:
                open_by_id.setdefault(m.tool_call_id, len(calls) - 1)
        elif m.event == "tool_call_finished" and m.tool_call_id is not None:
            index = open_by_id.pop(m.tool_call_id, None)
            if index is not None:
                calls[index] = msgspec.structs.replace(calls[index], finished_ts=m.ts, status=m.status)
    return calls


def tool_policy_event(run_id: str, seq: int, call: ToolCall) -> PolicyEvent:
    """The `layers/policy.ndjson` line for one tool decision (`allow:read_file`)."""
    assert call.decision is not None
    return PolicyEvent(
        schema=POLICY_EVENT_SCHEMA,
        run_id=run_id,
        seq=seq,
        source="tool",
        decision=call.decision,  # type: ignore[arg-type]  # "allow" | "deny" from the SDK server
        target=call.tool,
        access=TOOL_ACCESS,
        rule=call.rule or "",
        tool_call_id=call.tool_call_id,
        summary=decision_summary("tool", call.decision, call.tool),  # type: ignore[arg-type]
    )
