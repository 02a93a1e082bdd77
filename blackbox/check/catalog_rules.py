"""What each catalog event must carry, and the run's required artifacts and constraints.

- `catalog`: per-event action types, summaries and artifact metadata
  (the catalog of the reference's design/events-blackbox.md).
- `artifacts`: the run references stdout, stderr and the diff, and a
  commands_observed event references the command log (contract 4.5.2).
- `constraints`: constraint types of the POC ids; every constraint the run
  emitted is evaluated in evaluation_performed, in its section; nothing is
  evaluated that was not emitted; run_finished states the statuses that
  evaluation_performed set (contract 4.2.2, catalog 8 and 9).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from blackbox.catalog import (
    ACTION_BY_EVENT,
    AGENT_COMPLETED,
    AGENT_INVOKED,
    ARTIFACT_COMMANDS,
    ARTIFACT_DIFF,
    ARTIFACT_STDERR,
    ARTIFACT_STDOUT,
    ARTIFACTS_CAPTURED,
    COMMANDS_OBSERVED,
    COMMANDS_UNAVAILABLE,
    DIFF_METHODS,
    EVALUATION_PERFORMED,
    FS_DIFF_CAPTURED,
    POC_CONSTRAINTS,
    RUN_FINISHED,
    RUN_STARTED,
    UNAVAILABLE_REASONS,
    WORKSPACE_PREPARED,
)
from blackbox.check.base import Line, Violation, get, is_type

SECTIONS = ("alignment", "quality", "policy")


def _artifacts(ev: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    arts = get(ev, "agent_action", "artifacts") or []
    return [a for a in arts if isinstance(a, dict) and a.get("type") == kind]


def _meta(art: dict[str, Any]) -> dict[str, Any]:
    meta = art.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _ref(art: dict[str, Any], filename: str) -> bool:
    ref = art.get("content_ref")
    return isinstance(ref, str) and (ref == filename or ref.endswith("/" + filename))


def _summary(ev: dict[str, Any]) -> str:
    s = get(ev, "agent_action", "action_summary")
    return s if isinstance(s, str) else ""


def _needs_tokens(ev: dict[str, Any], tokens: tuple[str, ...], why: str) -> Iterator[str]:
    missing = [t for t in tokens if t not in _summary(ev)]
    if missing:
        yield f"action_summary must include {why} ({', '.join(missing)} not found)"


def _process(ev: dict[str, Any], keys: tuple[str, ...]) -> Iterator[str]:
    procs = _artifacts(ev, "process")
    if not procs:
        yield "must include a 'process' artifact"
    elif missing := [k for k in keys if k not in _meta(procs[0])]:
        yield f"the process artifact's metadata lacks {', '.join(missing)}"


def _log(ev: dict[str, Any], kind: str, filename: str) -> Iterator[str]:
    arts = [a for a in _artifacts(ev, kind) if _ref(a, filename)]
    if not arts:
        yield f"must include a {kind} artifact with content_ref {filename}"
    for a in arts:
        if get(a, "metadata", "non_normative") is not True:
            yield f"the {filename} artifact must mark metadata.non_normative: true (declared output)"
        if not str(a.get("hash", "")).startswith("sha256:"):
            yield f"the {filename} artifact needs a sha256: hash"


def per_event(name: str, ev: dict[str, Any]) -> Iterator[str]:
    """Catalog requirements of the event `name`."""
    action = get(ev, "agent_action", "action_type")
    if name in ACTION_BY_EVENT and isinstance(action, str) and action not in ACTION_BY_EVENT[name]:
        yield f"{name}: action_type must be {'|'.join(sorted(ACTION_BY_EVENT[name]))}, got {action!r}"
    session = ev["session"] if isinstance(ev.get("session"), dict) else {}
    if name == RUN_STARTED:
        ids = tuple(str(session.get(k)) for k in ("run_id", "session_id"))
        yield from (f"{name}: {m}" for m in _needs_tokens(ev, ids, "the run_id and scenario_id"))
    elif name == WORKSPACE_PREPARED:
        if not get(ev, "request", "user_request_raw"):
            yield f"{name}: request.user_request_raw must carry the request (full, redacted or hash)"
        if not any(any("workspace_root" in k for k in _meta(a))
                   for a in get(ev, "agent_action", "artifacts") or [] if isinstance(a, dict)):
            yield f"{name}: an artifact's metadata must give the workspace root (workspace_root)"
    elif name == AGENT_INVOKED:
        yield from (f"{name}: {m}" for m in _needs_tokens(ev, ("verbose", "cwd"), "verbose on/off and cwd"))
        yield from (f"{name}: {m}" for m in _process(ev, ("cwd", "argv", "start_timestamp")))
    elif name == AGENT_COMPLETED:
        yield from (f"{name}: {m}" for m in _needs_tokens(ev, ("exit_code=", "duration_ms="),
                                                             "the exit code and duration"))
        yield from (f"{name}: {m}" for m in _process(ev, ("exit_code", "duration_ms")))
        embeds = _artifacts(ev, "stdout_log") or _artifacts(ev, "stderr_log")
        if embeds or get(ev, "model_output", "output_raw"):
            yield f"{name}: must not embed stdout/stderr (they are captured in artifacts_captured)"
    elif name == ARTIFACTS_CAPTURED:
        if get(ev, "model_output", "output_raw") not in (None, "captured_as_artifact"):
            yield f"{name}: model_output.output_raw must be 'captured_as_artifact' or null"
        yield from (f"{name}: {m}" for m in _log(ev, "stdout_log", ARTIFACT_STDOUT))
        yield from (f"{name}: {m}" for m in _log(ev, "stderr_log", ARTIFACT_STDERR))
    elif name == FS_DIFF_CAPTURED:
        yield from (f"{name}: {m}" for m in _diff(ev))
    elif name == COMMANDS_OBSERVED:
        yield from (f"{name}: {m}" for m in _commands(ev))
    elif name == COMMANDS_UNAVAILABLE and not any(r in _summary(ev) for r in UNAVAILABLE_REASONS):
        yield f"{name}: action_summary must state why ({' | '.join(UNAVAILABLE_REASONS)})"


def _diff(ev: dict[str, Any]) -> Iterator[str]:
    arts = [a for a in _artifacts(ev, "diff") if _ref(a, ARTIFACT_DIFF)]
    if not arts:
        yield f"must include a diff artifact with content_ref {ARTIFACT_DIFF}"
        return
    meta, art = _meta(arts[0]), arts[0]
    if not isinstance(meta.get("changed_paths"), list):
        yield "the diff artifact's metadata must list changed_paths"
    if not is_type(meta.get("total_changed"), int):
        yield "the diff artifact's metadata must count total_changed"
    if meta.get("method") not in DIFF_METHODS:
        yield f"the diff artifact's metadata.method must be {'|'.join(sorted(DIFF_METHODS))}"
    if not str(art.get("hash", "")).startswith("sha256:"):
        yield "the diff artifact needs a sha256: hash"


def _commands(ev: dict[str, Any]) -> Iterator[str]:
    arts = [a for a in _artifacts(ev, "command_log") if _ref(a, ARTIFACT_COMMANDS)]
    if not arts:
        yield f"must reference a command_log artifact with content_ref {ARTIFACT_COMMANDS}"
        return
    meta = _meta(arts[0])
    if not is_type(meta.get("observed_count"), int):
        yield "the command_log artifact's metadata must give observed_count"
    if not isinstance(meta.get("categories_seen"), dict | list):
        yield "the command_log artifact's metadata must give categories_seen"
    if not isinstance(meta.get("coverage"), str) or not meta["coverage"]:
        yield "the command_log artifact's metadata must say what the log covers (coverage)"


def run_wide(lines: list[Line]) -> Iterator[tuple[int, str]]:
    """Required artifacts across the run, and how constraints and evaluations line up."""
    by_name = {line.name: line for line in lines if line.name}
    last = lines[-1].number
    complete = RUN_FINISHED in by_name
    for kind, filename in (("stdout_log", ARTIFACT_STDOUT), ("stderr_log", ARTIFACT_STDERR),
                           ("diff", ARTIFACT_DIFF)):
        found = any(_ref(a, filename) for line in lines for a in _artifacts(line.event or {}, kind))
        if complete and not found:
            yield last, f"[artifacts] the run never references {filename} ({kind})"
    yield from _constraints(lines, by_name)


def _constraints(lines: list[Line], by_name: dict[str, Line]) -> Iterator[tuple[int, str]]:
    emitted: dict[str, str] = {}
    for line in lines:
        for c in get(line.event, "request", "constraints") or []:
            if not isinstance(c, dict) or not isinstance(c.get("id"), str):
                continue
            if c["id"] in POC_CONSTRAINTS and c.get("type") != POC_CONSTRAINTS[c["id"]][0]:
                yield line.number, (f"[constraints] {c['id']} must have type "
                                    f"{POC_CONSTRAINTS[c['id']][0]!r}, got {c.get('type')!r}")
            emitted.setdefault(c["id"], str(c.get("type")))
    ev_line = by_name.get(EVALUATION_PERFORMED)
    if ev_line is None or ev_line.event is None:
        return
    evaluated: dict[str, set[str]] = {}
    for section in SECTIONS:
        for kind in ("checks", "violations"):
            for f in get(ev_line.event, "evaluation", section, kind) or []:
                if isinstance(f, dict) and isinstance(f.get("id"), str):
                    evaluated.setdefault(f["id"], set()).add(section)
    for cid in emitted:
        if cid not in evaluated:
            yield ev_line.number, f"[constraints] constraint {cid} was emitted but never evaluated"
        elif cid in POC_CONSTRAINTS and POC_CONSTRAINTS[cid][1] not in evaluated[cid]:
            yield ev_line.number, f"[constraints] {cid} belongs in evaluation.{POC_CONSTRAINTS[cid][1]}"
    for cid in sorted(set(evaluated) - set(emitted)):
        yield ev_line.number, f"[constraints] {cid} is evaluated but no event emitted it as a constraint"
    fin = by_name.get(RUN_FINISHED)
    if fin is not None and fin.event is not None:
        for section in SECTIONS:
            status = get(ev_line.event, "evaluation", section, "status")
            if f"{section}={status}" not in _summary(fin.event):
                yield fin.number, f"[catalog] run_finished: action_summary must state {section}={status}"


def check(lines: list[Line]) -> list[Violation]:
    out = [Violation(line.number, "catalog", msg) for line in lines
           if line.event is not None and line.name for msg in per_event(line.name, line.event)]
    for number, msg in run_wide(lines) if lines else ():
        rule, _, text = msg[1:].partition("] ")
        out.append(Violation(number, rule, text))
    return out
