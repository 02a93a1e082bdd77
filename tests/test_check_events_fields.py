"""check-events, rule family `fields`: required fields, their types and enums (contract 2 and 4)."""

from __future__ import annotations

import pytest

from tests.events_support import by_name, check, load

TOP = ("schema_version", "event_id", "timestamp", "trace_id", "span_id", "parent_span_id",
       "observability_mode", "session", "request", "prompt_provenance", "model_output",
       "agent_action", "evaluation")
NESTED = (
    ("session", "session_id"), ("session", "run_id"), ("session", "agent_id"),
    ("session", "agent_version"), ("session", "environment"),
    ("request", "request_id"), ("request", "user_request_raw"), ("request", "constraints"),
    ("request", "context"),
    ("prompt_provenance", "provider"), ("prompt_provenance", "model"), ("prompt_provenance", "capture_mode"),
    ("prompt_provenance", "prompt_bundle"), ("prompt_provenance", "prompt_bundle_hash"),
    ("prompt_provenance", "parameters"),
    ("model_output", "completion_id"), ("model_output", "output_raw"), ("model_output", "output_structured"),
    ("model_output", "tool_calls"), ("model_output", "usage"),
    ("agent_action", "action_type"), ("agent_action", "action_summary"), ("agent_action", "artifacts"),
    ("agent_action", "tool_results"),
)


@pytest.mark.parametrize("field", TOP)
def test_each_top_level_field_is_required(field: str) -> None:
    events = load()
    del events[4][field]
    found = [v for v in check(events) if v.rule == "fields"]
    assert [(v.line, v.message) for v in found] == [(5, f"missing required field {field}")]


@pytest.mark.parametrize(("obj", "field"), NESTED)
def test_each_nested_field_is_required(obj: str, field: str) -> None:
    events = load()
    del events[5][obj][field]
    found = [v for v in check(events) if v.rule == "fields"]
    assert [(v.line, v.message) for v in found] == [(6, f"missing required field {obj}.{field}")]


@pytest.mark.parametrize(("path", "value", "words"), [
    (("session", "environment"), "laptop", "session.environment 'laptop' is not one of"),
    (("session", "agent_id"), "codex", "session.agent_id 'codex' is not one of claude-code"),
    (("prompt_provenance", "capture_mode"), "partial", "capture_mode 'partial' is not one of"),
    (("agent_action", "action_type"), "think", "action_type 'think' is not one of"),
    (("evaluation", "policy", "status"), "ok", "evaluation.policy.status 'ok' is not one of"),
    (("timestamp",), "yesterday", "timestamp 'yesterday' is not RFC3339"),
    (("timestamp",), "2026-11-26T05:00:00", "is not RFC3339"),
    (("event_id",), 7, "event_id must be str, got int"),
    (("parent_span_id",), 0, "parent_span_id must be str|null, got int"),
    (("model_output", "usage", "input_tokens"), "12", "usage.input_tokens must be a number or null"),
    (("evaluation", "alignment", "score"), True, "alignment.score must be int|float|null, got bool"),
])
def test_types_and_enums(path: tuple[str, ...], value: object, words: str) -> None:
    events = load()
    target = events[3]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    found = [v for v in check(events) if v.rule == "fields"]
    assert any(words in v.message and v.line == 4 for v in found), found


def test_constraint_check_and_violation_shapes() -> None:
    events = load("fail")
    ev = by_name(events, "evaluation_performed")
    ev["request"]["constraints"][0]["type"] = "taste"
    del ev["evaluation"]["policy"]["checks"][0]["evidence"]
    ev["evaluation"]["alignment"]["violations"][0]["severity"] = "fatal"
    del ev["evaluation"]["quality"]["checks"]
    messages = [v.message for v in check(events) if v.rule == "fields"]
    enum = "format|other|quality|safety|scope|style"
    assert f"request.constraints[0].type 'taste' is not one of {enum}" in messages
    assert "missing required field evaluation.policy.checks[0].evidence" in messages
    assert "evaluation.alignment.violations[0].severity 'fatal' is not one of fail|warn" in messages
    assert "missing required field evaluation.quality.checks" in messages


def test_artifact_shape() -> None:
    events = load()
    art = by_name(events, "fs_diff_captured")["agent_action"]["artifacts"][0]
    del art["hash"]
    art["metadata"] = []
    messages = [v.message for v in check(events) if v.rule == "fields"]
    assert "missing required field agent_action.artifacts[0].hash" in messages
    assert "agent_action.artifacts[0].metadata must be dict, got list" in messages
