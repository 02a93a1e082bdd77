"""Per-line rules: required fields, their types and enums (contract sections 2 and 4).

Rule id `fields`. Each missing or mistyped field is one violation naming
its dotted path, so a reader can fix the writer from the message alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from blackbox.catalog import (
    ACTION_TYPES,
    AGENT_ID,
    CAPTURE_MODES,
    CONSTRAINT_TYPES,
    ENVIRONMENTS,
    SEVERITIES,
    STATUSES,
)
from blackbox.check.base import NUMBER, Line, Violation, get, is_type, parse_time

RULE = "fields"
_STR = (str,)
_OPT_STR = (str, type(None))
_OPT_NUM = (*NUMBER, type(None))
Spec = dict[str, tuple[type, ...]]
"""A JSON object's fields: the types each may have."""

TOP: Spec = {
    "schema_version": _STR, "event_id": _STR, "timestamp": _STR, "trace_id": _STR, "span_id": _STR,
    "parent_span_id": _OPT_STR, "observability_mode": _STR, "session": (dict,), "request": (dict,),
    "prompt_provenance": (dict,), "model_output": (dict,), "agent_action": (dict,), "evaluation": (dict,),
}
SESSION: Spec = {"session_id": _STR, "run_id": _STR, "agent_id": _STR, "agent_version": _STR,
                 "environment": _STR}
REQUEST: Spec = {"request_id": _STR, "user_request_raw": _STR, "constraints": (list,), "context": (dict,)}
PROVENANCE: Spec = {"provider": _STR, "model": _STR, "capture_mode": _STR,
                    "prompt_bundle": (dict, type(None)), "prompt_bundle_hash": _STR, "parameters": (dict,)}
OUTPUT: Spec = {"completion_id": _OPT_STR, "output_raw": _OPT_STR, "output_structured": (dict, type(None)),
                "tool_calls": (list,), "usage": (dict,)}
ACTION: Spec = {"action_type": _STR, "action_summary": _STR, "artifacts": (list,), "tool_results": (list,)}
ARTIFACT: Spec = {"type": _STR, "id": _STR, "summary": _STR, "content_ref": _OPT_STR, "hash": _STR,
                  "metadata": (dict,)}
CONSTRAINT: Spec = {"id": _STR, "type": _STR, "rule": _STR}
VIOLATION: Spec = {"id": _STR, "severity": _STR, "message": _STR, "evidence": _STR}
CHECK: Spec = {"id": _STR, "status": _STR, "evidence": _STR}
SECTIONS: dict[str, Spec] = {"alignment": {"status": _STR, "score": _OPT_NUM, "violations": (list,)},
            "quality": {"status": _STR, "checks": (list,)},
            "policy": {"status": _STR, "checks": (list,)}}
OPTIONAL_NUMBERS = {"prompt_provenance.parameters": ("temperature", "top_p", "max_tokens"),
                    "model_output.usage": ("input_tokens", "output_tokens", "latency_ms")}
ENUMS = (
    ("session.agent_id", frozenset({AGENT_ID})), ("session.environment", ENVIRONMENTS),
    ("prompt_provenance.capture_mode", frozenset(CAPTURE_MODES)),
    ("agent_action.action_type", ACTION_TYPES),
)


def _fields(obj: Any, spec: dict[str, tuple[type, ...]], where: str) -> Iterator[str]:
    for key, types in spec.items():
        path = f"{where}.{key}" if where else key
        if not isinstance(obj, dict) or key not in obj:
            yield f"missing required field {path}"
        elif not is_type(obj[key], types):
            names = "|".join("null" if t is type(None) else t.__name__ for t in types)
            yield f"{path} must be {names}, got {type(obj[key]).__name__}"


def _items(obj: Any, key: str, spec: dict[str, tuple[type, ...]], where: str) -> Iterator[str]:
    items = obj.get(key) if isinstance(obj, dict) else None
    for n, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            yield f"{where}.{key}[{n}] must be an object"
        else:
            yield from _fields(item, spec, f"{where}.{key}[{n}]")


def _enum(value: Any, allowed: frozenset[str], path: str) -> Iterator[str]:
    if isinstance(value, str) and value not in allowed:
        yield f"{path} {value!r} is not one of {'|'.join(sorted(allowed))}"


def problems(ev: dict[str, Any]) -> Iterator[str]:
    """Every field problem of one event object."""
    yield from _fields(ev, TOP, "")
    for key, spec in (("session", SESSION), ("request", REQUEST), ("prompt_provenance", PROVENANCE),
                      ("model_output", OUTPUT), ("agent_action", ACTION)):
        if isinstance(ev.get(key), dict):
            yield from _fields(ev[key], spec, key)
    if "timestamp" in ev and isinstance(ev["timestamp"], str) and parse_time(ev["timestamp"]) is None:
        yield f"timestamp {ev['timestamp']!r} is not RFC3339 with a zone (e.g. 2026-01-01T00:00:00.000000Z)"
    for path, allowed in ENUMS:
        yield from _enum(get(ev, *path.split(".")), allowed, path)
    for path, keys in OPTIONAL_NUMBERS.items():
        obj = get(ev, *path.split("."))
        for key in keys:
            if isinstance(obj, dict) and key in obj and not is_type(obj[key], _OPT_NUM):
                yield f"{path}.{key} must be a number or null"
    yield from _items(ev.get("request"), "constraints", CONSTRAINT, "request")
    for n, c in enumerate(get(ev, "request", "constraints") or []):
        if isinstance(c, dict):
            yield from _enum(c.get("type"), CONSTRAINT_TYPES, f"request.constraints[{n}].type")
    yield from _items(ev.get("agent_action"), "artifacts", ARTIFACT, "agent_action")
    yield from _evaluation(ev.get("evaluation"))


def _evaluation(evaluation: Any) -> Iterator[str]:
    if not isinstance(evaluation, dict):
        return
    for name, spec in SECTIONS.items():
        section = evaluation.get(name)
        where = f"evaluation.{name}"
        if not isinstance(section, dict):
            yield f"missing required field {where}" if section is None else f"{where} must be an object"
            continue
        yield from _fields(section, spec, where)
        yield from _enum(section.get("status"), STATUSES, f"{where}.status")
        if "score" in section and not is_type(section["score"], _OPT_NUM):
            yield f"{where}.score must be a number or null"
        yield from _items(section, "violations", VIOLATION, where)
        yield from _items(section, "checks", CHECK, where)
        for n, v in enumerate(section.get("violations") or []):
            if isinstance(v, dict):
                yield from _enum(v.get("severity"), SEVERITIES, f"{where}.violations[{n}].severity")
        for n, c in enumerate(section.get("checks") or []):
            if isinstance(c, dict):
                yield from _enum(c.get("status"), STATUSES, f"{where}.checks[{n}].status")


def check(line: Line) -> list[Violation]:
    """The field violations of one parsed line."""
    assert line.event is not None
    return [Violation(line.number, RULE, msg) for msg in problems(line.event)]
