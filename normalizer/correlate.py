"""The policy layer and the correlation report: tool calls, their decisions, their evidence.

Upstream writes one policy line per tool decision and one correlation binding
per policy line, with the same `tool_call_id` and decision, in the same order
(crates/assay-runner-core/src/policy.rs:80-122, 206-217). Ours follow that
shape; what decides is ours (docs/policy.md):

- one decision per distinct `tool_call_id` the agent reported with a tool,
  in the order the calls started, when the run had a policy (a run without
  one records no decision, so it has no policy lines and no bindings);
- the decision is `deny` when the tool policy denied the call, or when the
  kernel blocked a file or connect inside the call's window (the block's own
  line stays in `layers/kernel.ndjson`); `source` says which layer decided.
  A block inside no window, or inside several overlapping ones, is not
  given to any call.

A call's window is the runner's receipt stamps of its `tool_call_started`
and `tool_call_finished` messages (an unfinished call's runs to the end of
the run). The agent blocks on the runner's reply to each, so the window
brackets the tool's real work, and kernel events carry capture times on the
same clock (CLOCK_MONOTONIC). A binding names the window by runner-defined
markers, `tool_call_started:<id>` .. `tool_call_completed:<id>` (or
`run_finished`), and counts the kernel lines with `start <= ts <= end`.

No SDK timestamps and no order fallback. Whatever cannot be bound exactly is
an ambiguity code and makes the report `partial` (docs/sdk.md lists them):
`tool_call_without_id:<tool>`, `tool_call_without_tool:<id>`,
`duplicate_tool_call_id:<id>` (one decision and binding for the id, the
first call's window), `tool_call_unfinished:<id>`,
`overlapping_tool_calls:<id1>,<id2>` (evidence inside both windows), and
upstream's own `policy_events_without_kernel_events` and
`sdk_tool_call_without_policy_binding:<id>` (policy.rs:188-197, sdk.rs:269-291).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from heapq import heappop, heappush
from typing import NamedTuple

from normalizer.artifacts import (
    CORRELATION_SCHEMA,
    POLICY_EVENT_SCHEMA,
    TOOL_DECISION,
    Binding,
    CorrelationReport,
    Decision,
    PolicyEvent,
    SdkEvent,
    Window,
)
from normalizer.sdk import ToolCall

STARTED = "tool_call_started"
COMPLETED = "tool_call_completed"
RUN_FINISHED = "run_finished"
SOURCE_TOOLS = "assay-runner://policy/tools"
SOURCE_BY_BLOCK = {
    "file_blocked": "assay-runner://policy/filesystem",
    "connect_blocked": "assay-runner://policy/network",
}
END = 2**63
"""Window end of an unfinished call: after every capture time."""


class Block(NamedTuple):
    """A kernel block line's capture time and kind."""

    ts: int
    kind: str


class Decided(NamedTuple):
    """The decision for one tool_call_id: the first call with it, and what decided."""

    call: ToolCall
    decision: Decision
    source: str


def marker(phase: str, tool_call_id: str) -> str:
    """The marker name that opens or closes a call's window."""
    return f"{phase}:{tool_call_id}"


def _end(call: ToolCall) -> int:
    return call.finished_ts if call.finished_ts is not None else END


def sole_call_blocks(calls: Sequence[ToolCall], blocks: Sequence[Block]) -> dict[int, Block]:
    """Call index -> the earliest block inside its window and no other call's.

    One sweep over calls and blocks in time order (a heap of open windows),
    so a flood of calls and blocks costs n log n, not n times m.
    """
    order = sorted(range(len(calls)), key=lambda i: calls[i].started_ts)
    open_calls: dict[int, None] = {}
    ends: list[tuple[int, int]] = []
    blocked: dict[int, Block] = {}
    j = 0
    for block in sorted(blocks):
        while j < len(order) and calls[order[j]].started_ts <= block.ts:
            open_calls[order[j]] = None
            heappush(ends, (_end(calls[order[j]]), order[j]))
            j += 1
        while ends and ends[0][0] < block.ts:
            open_calls.pop(heappop(ends)[1], None)
        if len(open_calls) == 1:
            blocked.setdefault(next(iter(open_calls)), block)
    return blocked


def decisions(calls: Sequence[ToolCall], blocks: Sequence[Block]) -> list[Decided]:
    """One decision per distinct id of a decided call with a tool, in start order."""
    blocked = sole_call_blocks(calls, blocks)
    by_id: dict[str, Decided] = {}
    for i, c in enumerate(calls):
        if c.tool_call_id is None or c.tool is None or c.decision is None:
            continue
        if c.decision == "deny":
            outcome = Decided(c, "deny", SOURCE_TOOLS)
        elif i in blocked:
            outcome = Decided(c, "deny", SOURCE_BY_BLOCK[blocked[i].kind])
        else:
            outcome = Decided(c, "allow", SOURCE_TOOLS)
        first = by_id.setdefault(c.tool_call_id, outcome)
        if first.decision == "allow" and outcome.decision == "deny":
            by_id[c.tool_call_id] = first._replace(decision="deny", source=outcome.source)
    return list(by_id.values())


def policy_events(decided: Sequence[Decided], run_id: str) -> list[PolicyEvent]:
    """`layers/policy.ndjson`: upstream's PolicyLayerEvent per decision."""
    return [
        PolicyEvent(
            schema=POLICY_EVENT_SCHEMA, run_id=run_id, seq=seq, source_event_type=TOOL_DECISION,
            source=d.source, tool_call_id=d.call.tool_call_id or "", tool=d.call.tool or "",
            decision=d.decision,
        )
        for seq, d in enumerate(decided)
    ]


def correlate(
    calls: Sequence[ToolCall],
    decided: Sequence[Decided],
    stamps: Sequence[int],
    sdk_lines: Sequence[SdkEvent],
    kernel_lines: int,
    run_id: str,
) -> CorrelationReport:
    """One binding per decision (policy-line order); ambiguities sorted."""
    stamps = sorted(stamps)
    bindings = []
    for d in decided:
        c, call_id = d.call, d.call.tool_call_id or ""
        end = marker(COMPLETED, call_id) if c.finished_ts is not None else RUN_FINISHED
        bindings.append(Binding(
            tool_call_id=call_id, policy_decision=d.decision,
            kernel_event_count=_count(stamps, c.started_ts, _end(c)),
            window=Window(start=marker(STARTED, call_id), end=end),
        ))
    ambiguities = call_ambiguities(calls, stamps)
    if decided and not kernel_lines:
        ambiguities.append("policy_events_without_kernel_events")
    if decided:
        bound = {b.tool_call_id for b in bindings}
        unbound = {e.tool_call_id for e in sdk_lines if isinstance(e.tool_call_id, str)} - bound
        ambiguities += [f"sdk_tool_call_without_policy_binding:{i}" for i in unbound]
    ambiguities.sort()
    return CorrelationReport(
        schema=CORRELATION_SCHEMA,
        run_id=run_id,
        status="partial" if ambiguities else "clean",
        bindings=bindings,
        ambiguities=ambiguities,
    )


def call_ambiguities(calls: Sequence[ToolCall], stamps: Sequence[int]) -> list[str]:
    """What keeps the reported calls from being bound exactly, one code per call or pair."""
    codes: list[str] = []
    id_counts = Counter(c.tool_call_id for c in calls if c.tool_call_id is not None)
    unique: list[ToolCall] = []
    for c in calls:
        if c.tool_call_id is None:
            codes.append(f"tool_call_without_id:{c.tool or ''}")
            continue
        if c.tool is None:
            codes.append(f"tool_call_without_tool:{c.tool_call_id}")
        if id_counts[c.tool_call_id] > 1:
            continue  # reported once per id below
        if c.finished_ts is None:
            codes.append(f"tool_call_unfinished:{c.tool_call_id}")
        else:
            unique.append(c)
    codes += [f"duplicate_tool_call_id:{i}" for i, n in id_counts.items() if n > 1]
    return codes + overlaps(unique, stamps)


def overlaps(windowed: Sequence[ToolCall], stamps: Sequence[int]) -> list[str]:
    """`overlapping_tool_calls:<a>,<b>` for each pair of windows sharing evidence.

    Windows that overlap with no kernel event in the shared part are still
    exact (an event outside the shared part happened while only one of the
    two calls was running), so they are not ambiguous.
    """
    codes = []
    by_start = sorted(windowed, key=lambda c: c.started_ts)
    for i, a in enumerate(by_start):
        for b in by_start[i + 1 :]:
            if b.started_ts > _end(a):
                break  # later calls start later still
            if _count(stamps, b.started_ts, min(_end(a), _end(b))):
                first, second = sorted((a.tool_call_id or "", b.tool_call_id or ""))
                codes.append(f"overlapping_tool_calls:{first},{second}")
    return codes


def _count(stamps: Sequence[int], start: int, end: int) -> int:
    """Events with start <= ts <= end in a sorted list of stamps."""
    return bisect_right(stamps, end) - bisect_left(stamps, start)
