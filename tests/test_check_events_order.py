"""check-events, rule family `order`: the catalog's nine slots in order, 7 or 7b, incomplete runs named."""

from __future__ import annotations

import copy

from blackbox.catalog import COMMANDS_UNAVAILABLE
from tests.events_support import check, load, only


def test_events_out_of_order() -> None:
    events = load()
    events[3], events[4] = events[4], events[3]  # artifacts_captured before agent_completed
    events[3]["timestamp"], events[4]["timestamp"] = events[4]["timestamp"], events[3]["timestamp"]
    events[3]["parent_span_id"] = events[2]["span_id"]
    events[4]["parent_span_id"] = events[2]["span_id"]
    messages = [(v.line, v.message) for v in only(check(events), "order")]
    assert messages == [
        (4, "artifacts_captured comes before a missing agent_completed"),
        (5, "agent_completed is out of order or repeated: expected fs_diff_captured"),
    ]


def test_missing_and_repeated_events() -> None:
    events = load()
    del events[5]  # fs_diff_captured
    events.insert(2, copy.deepcopy(events[1]))
    events[2]["span_id"], events[2]["event_id"] = "0123456789abcdef", "other-event-id"
    messages = [(v.line, v.message) for v in check(events) if v.rule == "order"]
    assert messages == [
        (3, "workspace_prepared is out of order or repeated: expected agent_invoked"),
        (7, "commands_observed comes before a missing fs_diff_captured"),
    ]


def test_unknown_event_and_missing_name() -> None:
    events = load()
    events[4]["event"] = "agent_thinking"
    del events[5]["event"]
    messages = [(v.line, v.message) for v in check(events) if v.rule == "order"]
    assert (5, "unknown event 'agent_thinking': not in the black-box catalog") in messages
    assert (6, "no event name: add the 'event' field") in messages


def test_commands_observation_unavailable_takes_slot_7() -> None:
    events = load()
    ev = events[6]
    ev["event"] = COMMANDS_UNAVAILABLE
    ev["agent_action"].update(action_type="other", artifacts=[],
                              action_summary="command observation unavailable: reason=unknown (no spool)")
    # the evaluation cited the command log; without one it cites the diff only
    evaluation = events[7]["evaluation"]
    evaluation["quality"]["checks"][0].update(
        status="warn", evidence="fs_diff.patch: A test_summarize_logs.py; command_logs.jsonl: unavailable")
    evaluation["quality"]["status"] = "warn"
    events[8]["evaluation"] = evaluation
    events[8]["agent_action"]["action_summary"] = events[8]["agent_action"]["action_summary"].replace(
        "quality=pass", "quality=warn")
    assert check(events) == []
    both = load()
    both.insert(7, ev)
    assert [v.message for v in check(both) if v.rule == "order"] == [
        "commands_observation_unavailable is out of order or repeated: expected evaluation_performed"]


def test_a_run_cut_short_is_reported_incomplete_at_its_last_line() -> None:
    events = load()[:3]
    found = check(events)
    assert [(v.line, v.rule, v.message) for v in found] == [
        (3, "order", "run incomplete: it stops here; missing agent_completed, artifacts_captured, "
                     "fs_diff_captured, commands_observed or commands_observation_unavailable, "
                     "evaluation_performed, run_finished")]
