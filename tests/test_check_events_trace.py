"""check-events, rule family `trace`: one trace, unique spans, parents earlier, one session (contract 3.1)."""

from __future__ import annotations

from tests.events_support import check, load, only


def _messages(events: list[dict]) -> list[tuple[int, str]]:
    return [(v.line, v.message) for v in only(check(events), "trace")]


def test_trace_id_must_be_constant() -> None:
    events = load()
    events[6]["trace_id"] = "0" * 32
    expected = f"trace_id {'0' * 32!r} differs from the run's {events[0]['trace_id']!r}"
    assert _messages(events) == [(7, expected)]


def test_span_ids_must_be_unique() -> None:
    events = load()
    events[8]["span_id"] = events[3]["span_id"]
    assert _messages(events) == [(9, f"span_id {events[3]['span_id']!r} is not unique within the run")]


def test_parent_must_be_an_earlier_span() -> None:
    events = load()
    events[2]["parent_span_id"] = events[5]["span_id"]  # a later span
    events[4]["parent_span_id"] = "feedfacefeedface"  # no such span
    assert [m[0] for m in _messages(events)] == [3, 5]
    assert all("is not an earlier span_id of the run" in m for _, m in _messages(events))


def test_only_the_root_has_a_null_parent() -> None:
    events = load()
    events[7]["parent_span_id"] = None
    assert _messages(events) == [(8, "parent_span_id is null but this is not the root (first) event")]


def test_event_ids_are_unique_and_session_and_request_constant() -> None:
    events = load()
    events[5]["event_id"] = events[1]["event_id"]
    events[6]["session"]["run_id"] = "another-run"
    events[7]["request"]["request_id"] = "another-request"
    assert [m[0] for m in _messages(events)] == [6, 7, 8]
