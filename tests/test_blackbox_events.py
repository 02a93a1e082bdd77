"""The events writer: append-only lines, never rewritten, ids and times that satisfy the run invariants."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from blackbox.check import check_bytes
from blackbox.events import EventWriter, RunIdentity, rfc3339

IDENTITY = RunIdentity(
    session={"session_id": "s", "run_id": "r", "agent_id": "claude-code", "agent_version": "unknown",
             "environment": "local"},
    request_id="q", user_request="do it", provider="anthropic", capture_mode="full")


def test_each_event_is_a_complete_line_as_soon_as_it_is_emitted(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, IDENTITY)
    root = writer.emit("run_started", None, action_type="other", summary="run_id=r scenario_id=s")
    assert path.read_bytes().count(b"\n") == 1
    writer.emit("workspace_prepared", root, action_type="other", summary="workspace=empty")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["event"] for e in lines] == ["run_started", "workspace_prepared"]
    assert lines[1]["parent_span_id"] == lines[0]["span_id"] and lines[0]["parent_span_id"] is None
    assert len(lines[0]["trace_id"]) == 32 and len(lines[0]["span_id"]) == 16
    assert lines[0]["trace_id"] == lines[1]["trace_id"]
    assert list(lines[0]) == ["schema_version", "event", "event_id", "timestamp", "trace_id", "span_id",
                              "parent_span_id", "observability_mode", "session", "request",
                              "prompt_provenance", "model_output", "agent_action", "evaluation"]
    writer.close()
    # the writer's side of the contract holds (the catalog's content is the observer's job)
    rules = {v.rule for v in check_bytes(path.read_bytes())}
    assert "order" in rules and not rules & {"format", "fields", "black_box", "trace", "time", "evidence"}


def test_an_existing_events_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("earlier\n")
    with pytest.raises(FileExistsError):
        EventWriter(path, IDENTITY)
    assert path.read_text() == "earlier\n"


def test_timestamps_never_go_back_even_if_the_clock_does(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path / "events.jsonl", IDENTITY)
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    writer._last = ahead  # as if the wall clock had just been stepped back an hour
    writer.emit("run_started", None, action_type="other", summary="run_id=r scenario_id=s")
    (line,) = (tmp_path / "events.jsonl").read_text().splitlines()
    assert json.loads(line)["timestamp"] == rfc3339(ahead)


def test_undecodable_text_still_gives_a_valid_json_line(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path / "events.jsonl", IDENTITY)
    writer.emit("run_started", None, action_type="other", summary=b"run_id=r scenario_id=s \xff".decode(
        "utf-8", "surrogateescape"))
    data = (tmp_path / "events.jsonl").read_bytes()
    data.decode("utf-8")
    assert json.loads(data)["agent_action"]["action_summary"].endswith("\udcff")
