"""Run-level invariants (contract section 3 and 1.1): trace, spans, order, time.

- `trace`: one trace_id for the run; span_id unique; parent_span_id null
  only on the first event (the root), otherwise an earlier span; event_id
  unique; session and request_id the same on every line.
- `order`: the catalog's nine slots in order, each once (slot 7 is
  commands_observed or commands_observation_unavailable); a run that stops
  early is reported as incomplete, naming what is missing.
- `time`: timestamps never go backwards.
"""

from __future__ import annotations

from collections.abc import Iterator

from blackbox.catalog import CATALOG, EVENT_FIELD, EVENT_NAMES
from blackbox.check.base import Line, Violation, get, parse_time

_SLOT = {name: n for n, slot in enumerate(CATALOG) for name in slot}


def _slot_names(n: int) -> str:
    return " or ".join(CATALOG[n])


def trace(lines: list[Line]) -> Iterator[tuple[int, str]]:
    first = lines[0].event or {}
    trace_id, session = first.get("trace_id"), first.get("session")
    request_id = get(first, "request", "request_id")
    spans: set[str] = set()
    event_ids: set[str] = set()
    for n, line in enumerate(lines):
        ev = line.event or {}
        if ev.get("trace_id") != trace_id:
            yield line.number, f"trace_id {ev.get('trace_id')!r} differs from the run's {trace_id!r}"
        if ev.get("session") != session:
            yield line.number, "session differs from the first event's: one run, one session"
        if get(ev, "request", "request_id") != request_id:
            yield line.number, "request.request_id differs from the first event's"
        span, parent, eid = ev.get("span_id"), ev.get("parent_span_id"), ev.get("event_id")
        if isinstance(eid, str):
            if eid in event_ids:
                yield line.number, f"event_id {eid!r} is used twice"
            event_ids.add(eid)
        if parent is None:
            if n > 0 and "parent_span_id" in ev:
                yield line.number, "parent_span_id is null but this is not the root (first) event"
        elif parent not in spans:
            yield line.number, f"parent_span_id {parent!r} is not an earlier span_id of the run"
        if isinstance(span, str):
            if span in spans:
                yield line.number, f"span_id {span!r} is not unique within the run"
            spans.add(span)


def order(lines: list[Line]) -> Iterator[tuple[int, str]]:
    expected = 0
    for line in lines:
        name = line.name
        if name is None:
            yield line.number, f"no event name: add the {EVENT_FIELD!r} field"
            continue
        if name not in EVENT_NAMES:
            yield line.number, f"unknown event {name!r}: not in the black-box catalog"
            continue
        slot = _SLOT[name]
        if slot > expected:
            missing = ", ".join(_slot_names(k) for k in range(expected, slot))
            yield line.number, f"{name} comes before a missing {missing}"
        elif slot < expected:
            yield line.number, f"{name} is out of order or repeated: expected {_slot_names(expected)}" \
                if expected < len(CATALOG) else f"{name} after run_finished: the run was already over"
            continue
        expected = slot + 1
    if expected < len(CATALOG):
        missing = ", ".join(_slot_names(k) for k in range(expected, len(CATALOG)))
        yield lines[-1].number, f"run incomplete: it stops here; missing {missing}"


def time(lines: list[Line]) -> Iterator[tuple[int, str]]:
    last = None
    for line in lines:
        ts = parse_time((line.event or {}).get("timestamp"))
        if ts is None:
            continue
        if last is not None and ts < last:
            yield line.number, "timestamp goes backwards: lines must be non-decreasing in time"
        last = ts if last is None else max(last, ts)


FAMILIES = (("trace", trace), ("order", order), ("time", time))


def check(lines: list[Line]) -> list[Violation]:
    """Run-level violations over the lines that parsed as objects."""
    if not lines:
        return []
    return [Violation(n, rule, msg) for rule, fn in FAMILIES for n, msg in fn(lines)]
