"""The SDK layer: what the agent reported over the SDK channel, as contract lines.

Pure: stamped `SdkMessage`s in (the spool's `sdk` frames), the lines of
`layers/sdk.ndjson` and the tool calls (with the runner's tool decisions)
for the policy layer and correlation out. The layer is `self_reported`: the
agent's runtime says what it did; the runner only stamps receipt times on
its own clock and answers with its tool policy.

Lines follow upstream's `SdkLayerEvent` and what its ingest accepts
(crates/assay-runner-core/src/sdk.rs:80-137, 229-260):

- `tool_call_started` stays; `tool_call_finished` is upstream's
  `tool_call_completed`; both need a non-blank `tool_call_id` and `tool`,
  so a call without an id is not a line (correlation reports it as an
  ambiguity, the raw message stays in the spool);
- `sdk_hello` is not an event upstream knows: the first hello's name and
  version become `sdk_name`/`sdk_version` of every later line (one pair per
  archive, as upstream's cross-runtime diff requires; a later, different
  hello stays in the spool only), and `source` is that name, or `assay_sdk`
  (the channel's client) before any hello;
- the agent's finish `status` (ok/error/denied) has no upstream field and
  stays in the spool.

Every agent-provided string is redacted on the way in (normalizer/redact.py),
so the ids and tool names in every member are the same redacted text.

A call and its finish are paired by `tool_call_id` only. Calls without an id
are kept unpaired (pairing them by order would be exactly the fallback the
contract forbids).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from normalizer.artifacts import SDK_EVENT_SCHEMA, SdkEvent
from normalizer.redact import Redactor
from spool.format import SdkMessage

CHANNEL_SOURCE = "assay_sdk"
"""`source` of lines reported before any `sdk_hello` named the runtime."""


class ToolCall(msgspec.Struct, frozen=True):
    """One reported tool call with its runner-clock receipt stamps.

    `tool_call_id`/`tool` are None when the agent gave none (or only
    whitespace); `finished_ts` is None when no finish with this id arrived
    (and always for id-less calls); `decision`/`rule` are None when the run
    had no tool policy.
    """

    tool_call_id: str | None
    tool: str | None
    started_ts: int
    finished_ts: int | None
    decision: str | None
    rule: str | None


class SdkLayer(msgspec.Struct, frozen=True):
    """Everything the archive takes from the SDK channel."""

    sdk_events: list[SdkEvent]
    tool_calls: list[ToolCall]

    @property
    def status(self) -> Literal["self_reported", "absent"]:
        """`observation-health.json`'s sdk_layer: self_reported iff there are lines (sdk.rs:169-170)."""
        return "self_reported" if self.sdk_events else "absent"

    @property
    def note(self) -> str | None:
        """Upstream's `s5_sdk_capture` note (sdk.rs:175-181); None without lines."""
        if not self.sdk_events:
            return None
        ids = {e.tool_call_id for e in self.sdk_events if isinstance(e.tool_call_id, str)}
        return f"s5_sdk_capture: sdk_events={len(self.sdk_events)} sdk_tool_calls={len(ids)}"


def _usable(text: str | None, redactor: Redactor) -> str | None:
    """The redacted text, or None for a missing or blank one (upstream trims and refuses blanks)."""
    if text is None or not text.strip():
        return None
    return redactor.redact(text)


def redacted(messages: list[SdkMessage], redactor: Redactor) -> list[SdkMessage]:
    """Messages in receipt order with every agent string redacted and blanks made None."""
    ordered = sorted(messages, key=lambda m: m.ts)  # stable: receipt order on equal stamps
    return [
        msgspec.structs.replace(
            m,
            sdk_name=_usable(m.sdk_name, redactor) or "",
            sdk_version=_usable(m.sdk_version, redactor) or "",
            tool=_usable(m.tool, redactor),
            tool_call_id=_usable(m.tool_call_id, redactor),
        )
        for m in ordered
    ]


def sdk_layer(messages: list[SdkMessage], run_id: str, redactor: Redactor) -> SdkLayer:
    """Build the SDK layer from the run's stamped messages."""
    ordered = redacted(messages, redactor)
    calls = tool_calls(ordered)
    return SdkLayer(sdk_events=sdk_events(ordered, calls, run_id), tool_calls=calls)


def sdk_events(ordered: list[SdkMessage], calls: list[ToolCall], run_id: str) -> list[SdkEvent]:
    """`layers/sdk.ndjson` lines in receipt order (see the module docstring)."""
    hello = next((m for m in ordered if m.event == "sdk_hello" and m.sdk_name), None)
    tool_by_id = {c.tool_call_id: c.tool for c in calls if c.tool_call_id is not None}
    named = False
    lines: list[SdkEvent] = []
    for m in ordered:
        named = named or m is hello
        if m.event not in ("tool_call_started", "tool_call_finished"):
            continue
        if m.tool_call_id is None:
            continue
        tool = m.tool or tool_by_id.get(m.tool_call_id)
        if tool is None:
            continue
        event = SdkEvent(
            schema=SDK_EVENT_SCHEMA,
            run_id=run_id,
            seq=len(lines),
            event_type="tool_call_started" if m.event == "tool_call_started" else "tool_call_completed",
            source=hello.sdk_name if named and hello else CHANNEL_SOURCE,
            tool_call_id=m.tool_call_id,
            tool=tool,
        )
        if named and hello:
            event.sdk_name = hello.sdk_name
            event.sdk_version = hello.sdk_version or msgspec.UNSET
        lines.append(event)
    return lines


def tool_calls(ordered: list[SdkMessage]) -> list[ToolCall]:
    """Tool calls in start order; a finish closes the open call with its id."""
    calls: list[ToolCall] = []
    open_by_id: dict[str, int] = {}
    for m in ordered:
        if m.event == "tool_call_started":
            calls.append(ToolCall(tool_call_id=m.tool_call_id, tool=m.tool, started_ts=m.ts,
                                  finished_ts=None, decision=m.decision, rule=m.rule))
            if m.tool_call_id is not None:
                open_by_id.setdefault(m.tool_call_id, len(calls) - 1)
        elif m.event == "tool_call_finished" and m.tool_call_id is not None:
            index = open_by_id.pop(m.tool_call_id, None)
            if index is not None:
                calls[index] = msgspec.structs.replace(calls[index], finished_ts=m.ts)
    return calls
