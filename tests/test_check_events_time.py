"""check-events, rule family `time`: timestamps are non-decreasing (contract 1.1)."""

from __future__ import annotations

from tests.events_support import check, load, only


def test_timestamps_never_go_backwards() -> None:
    events = load()
    events[4]["timestamp"] = "2000-01-01T00:00:00.000000Z"
    events[6]["timestamp"] = events[5]["timestamp"]  # equal is fine: non-decreasing
    assert [(v.line, v.message) for v in only(check(events), "time")] == [
        (5, "timestamp goes backwards: lines must be non-decreasing in time")]
