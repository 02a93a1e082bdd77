"""Bind tool calls to the kernel evidence that happened inside them.

A call's window is the runner's own receipt stamps of its
`tool_call_started` and `tool_call_finished` messages. The agent blocks on
the runner's reply to each, so the window brackets the tool's real work,
and kernel events carry capture times on the same clock (CLOCK_MONOTONIC).
`kernel_event_count` counts normalized evidence with
`started <= ts <= finished`.

Nothing else is used: no SDK timestamps (the protocol has none) and no
order. Whatever cannot be bound exactly becomes an ambiguity code and makes
the report `partial` (docs/sdk.md lists the codes):

- `tool_call_without_id:<tool>`: no stable id, so no binding;
- `duplicate_tool_call_id:<id>`: the id is not a key, so no binding for it;
- `tool_call_unfinished:<id>`: no finish, so no window and no binding;
- `overlapping_tool_calls:<id1>,<id2>`: evidence falls inside both windows
  and cannot be given to either (both bindings stay, counting their windows);
- `tool_call_without_policy_decision:<id>`: bound, but no tool decision.

One code per affected call (or pair), sorted. With no tool calls the report
is `clean` with no bindings: nothing is unresolved.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence

from normalizer.artifacts import CORRELATION_SCHEMA, Binding, CorrelationReport, Window
from normalizer.classify import Classified
from normalizer.sdk import ToolCall
from spool.format import Phase

STARTED = "tool_call_started"
FINISHED = "tool_call_finished"


def marker(phase: str, tool_call_id: str) -> str:
    """The phase-marker name that opens or closes a call's window."""
    return f"{phase}:{tool_call_id}"


def window_markers(calls: Sequence[ToolCall]) -> list[Phase]:
    """Runner-clock markers of every call with an id, for `events.ndjson` (ts order).

    They are real runner events (the receipt of each message), so a
    binding's `window` names markers that the archive itself contains.
    """
    markers = []
    for c in calls:
        if c.tool_call_id is None:
            continue
        markers.append(Phase(name=marker(STARTED, c.tool_call_id), ts=c.started_ts))
        if c.finished_ts is not None:
            markers.append(Phase(name=marker(FINISHED, c.tool_call_id), ts=c.finished_ts))
    return sorted(markers, key=lambda p: (p.ts, p.name))


def correlate(
    calls: Sequence[ToolCall], evidence: Sequence[Classified], run_id: str, policy_present: bool
) -> CorrelationReport:
    """One binding per uniquely identified, finished call, sorted by id; ambiguities sorted."""
    ambiguities: list[str] = []
    id_counts = Counter(c.tool_call_id for c in calls if c.tool_call_id is not None)
    windowed: list[ToolCall] = []
    for c in calls:
        if c.tool_call_id is None:
            ambiguities.append(f"tool_call_without_id:{c.tool}")
        elif id_counts[c.tool_call_id] > 1:
            continue  # reported once per id below
        elif c.finished_ts is None:
            ambiguities.append(f"tool_call_unfinished:{c.tool_call_id}")
        else:
            windowed.append(c)
    ambiguities += [f"duplicate_tool_call_id:{i}" for i, n in id_counts.items() if n > 1]

    stamps = sorted(e.ts for e in evidence)
    ambiguities += overlaps(windowed, stamps)
    bindings = []
    for c in windowed:
        assert c.tool_call_id is not None and c.finished_ts is not None
        decision = c.decision if policy_present else None
        if decision is None:
            ambiguities.append(f"tool_call_without_policy_decision:{c.tool_call_id}")
        bindings.append(
            Binding(
                tool_call_id=c.tool_call_id,
                policy_decision=decision,
                kernel_event_count=_count(stamps, c.started_ts, c.finished_ts),
                window=Window(start=marker(STARTED, c.tool_call_id), end=marker(FINISHED, c.tool_call_id)),
            )
        )
    bindings.sort(key=lambda b: b.tool_call_id)
    ambiguities.sort()
    return CorrelationReport(
        schema=CORRELATION_SCHEMA,
        run_id=run_id,
        status="partial" if ambiguities else "clean",
        bindings=bindings,
        ambiguities=ambiguities,
    )


def overlaps(windowed: Sequence[ToolCall], stamps: Sequence[int]) -> list[str]:
    """`overlapping_tool_calls:<a>,<b>` for each pair of windows sharing evidence.

    Windows that overlap with no kernel event in the shared part are still
    exact (an event outside the shared part happened while only one of the
    two calls was running), so they are not ambiguous.
    """
    codes = []
    by_start = sorted(windowed, key=lambda c: c.started_ts)
    for i, a in enumerate(by_start):
        assert a.finished_ts is not None
        for b in by_start[i + 1 :]:
            assert b.finished_ts is not None
            if b.started_ts > a.finished_ts:
                break  # later calls start later still
            if _count(stamps, b.started_ts, min(a.finished_ts, b.finished_ts)):
                first, second = sorted((a.tool_call_id or "", b.tool_call_id or ""))
                codes.append(f"overlapping_tool_calls:{first},{second}")
    return codes


def _count(stamps: Sequence[int], start: int, end: int) -> int:
    """Events with start <= ts <= end in a sorted list of stamps."""
    return bisect_right(stamps, end) - bisect_left(stamps, start)
