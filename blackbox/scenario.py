"""Scenarios: `scenario.md` (what is asked) and `parameters.json` (how the run is set up).

The markdown is the source of truth for the request. Its sections are found
by their `## ` headings (case-insensitive); the raw request is the body of
`User Request (Raw)` verbatim, and each bullet of `Explicit Constraints`
becomes one constraint object, mapped onto the POC vocabulary by keyword
(docs/blackbox.md lists the keywords) or kept as an `other.<slug>`
constraint the evaluation reports as `unknown`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from blackbox.capture import apply_mode
from blackbox.catalog import (
    CAPTURE_MODES,
    JSON_ONLY,
    NO_CI_CHANGES,
    NO_EMOJIS,
    POC_CONSTRAINTS,
    TESTS_REQUIRED,
    WORKSPACE_MODES,
)

SECTIONS = ("Objective", "User Request (Raw)", "Explicit Constraints", "Prohibited Actions",
            "Success Criteria")
SCENARIO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

_KEYWORDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (JSON_ONLY, re.compile(r"\bjson\b", re.I)),
    (NO_EMOJIS, re.compile(r"\bemojis?\b", re.I)),
    (NO_CI_CHANGES, re.compile(r"\bCI\b|continuous integration|\bworkflows?\b|pipeline config")),
    (TESTS_REQUIRED, re.compile(r"\btests?\b|\btesting\b", re.I)),
)


class ScenarioError(ValueError):
    """The scenario cannot be used; the message says which file and what to fix."""


@dataclass(frozen=True)
class Constraint:
    """One constraint object of the contract (id, type, rule) plus the scenario line it came from."""

    id: str
    type: str
    rule: str
    source: str

    def as_event(self, mode: str) -> dict[str, str]:
        """The contract's constraint object; its text secret-redacted in every mode but full.

        Not hashed in `hashed` mode: the rules are the evaluation's vocabulary,
        which a reader must be able to read.
        """
        shown = (lambda t: t) if mode == "full" else (lambda t: apply_mode(t, "redacted"))
        return {"id": self.id, "type": self.type, "rule": shown(self.rule), "source": shown(self.source)}


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario: identity, request text, constraints and run set-up."""

    scenario_id: str
    user_request: str
    constraints: tuple[Constraint, ...]
    workspace_mode: str = "empty"
    capture_mode: str = "full"
    objective: str = ""
    prohibited_actions: tuple[str, ...] = ()
    success_criteria: tuple[str, ...] = ()
    parameters: dict[str, object] = field(default_factory=dict)


class Sections(TypedDict):
    """The fields scenario.md gives a Scenario, by their names there."""

    user_request: str
    objective: str
    constraints: tuple[Constraint, ...]
    prohibited_actions: tuple[str, ...]
    success_criteria: tuple[str, ...]


def split_sections(text: str) -> dict[str, str]:
    """`## Heading` -> body (stripped), keyed by the lower-cased heading."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = re.match(r"^##\s+(.+?)\s*#*\s*$", line)
        if m and not line.startswith("###"):
            current = sections.setdefault(m.group(1).strip().lower(), [])
            continue
        if current is not None:
            current.append(line)
    return {k: "\n".join(v).strip() for k, v in sections.items()}


def bullets(body: str) -> tuple[str, ...]:
    """The items of a markdown list (`-`, `*` or `1.`), continuation lines joined."""
    items: list[str] = []
    for line in body.splitlines():
        m = re.match(r"^\s*(?:[-*+]|\d+[.)])\s+(.*\S)", line)
        if m:
            items.append(m.group(1))
        elif line.strip() and items:
            items[-1] += " " + line.strip()
    return tuple(items)


def map_constraint(text: str) -> Constraint:
    """A scenario line onto the POC vocabulary by keyword, else `other.<slug>`."""
    for cid, pattern in _KEYWORDS:
        if pattern.search(text):
            ctype, _section, _rule = POC_CONSTRAINTS[cid]
            return Constraint(cid, ctype, text, text)
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:48] or "constraint"
    return Constraint(f"other.{slug}", "other", text, text)


def constraints_from(lines: tuple[str, ...]) -> tuple[Constraint, ...]:
    """One constraint per id: two lines mapping to one id keep the first, in scenario order."""
    seen: dict[str, Constraint] = {}
    for line in lines:
        c = map_constraint(line)
        seen.setdefault(c.id, c)
    return tuple(seen.values())


def parse_scenario_md(text: str, where: str = "scenario.md") -> Sections:
    """The sections of scenario.md; the raw request is required and must not be empty."""
    sections = split_sections(text)
    request = sections.get("user request (raw)", "")
    if not request:
        raise ScenarioError(f"{where}: no '## User Request (Raw)' section with text: add the request "
                            "the agent receives under that heading")
    return {
        "user_request": request,
        "objective": sections.get("objective", ""),
        "constraints": constraints_from(bullets(sections.get("explicit constraints", ""))),
        "prohibited_actions": bullets(sections.get("prohibited actions", "")),
        "success_criteria": bullets(sections.get("success criteria", "")),
    }


def parse_parameters(text: str, where: str = "parameters.json") -> dict[str, object]:
    """parameters.json as an object, with its three run settings checked."""
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}): fix the file") \
            from None
    if not isinstance(params, dict):
        raise ScenarioError(f"{where}: must be a JSON object with scenario_id, workspace_mode, capture_mode")
    sid = params.get("scenario_id")
    if sid is not None and (not isinstance(sid, str) or not SCENARIO_ID.match(sid)):
        raise ScenarioError(f"{where}: scenario_id {sid!r} must be 1-128 letters, digits, '.', '_' or '-'")
    for key, allowed in (("workspace_mode", WORKSPACE_MODES), ("capture_mode", CAPTURE_MODES)):
        if key in params and params[key] not in allowed:
            raise ScenarioError(f"{where}: {key} {params[key]!r} must be one of {'|'.join(allowed)}")
    return params


def load_scenario(path: Path) -> Scenario:
    """A scenario from a directory (scenario.md + parameters.json) or a scenario.md file.

    parameters.json is optional next to a scenario.md file; the scenario id
    then defaults to the directory's name.
    """
    md = path / "scenario.md" if path.is_dir() else path
    try:
        text = md.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"cannot read scenario {md}: {getattr(exc, 'strerror', None) or exc}") from None
    fields = parse_scenario_md(text, str(md))
    pfile = md.parent / "parameters.json"
    params: dict[str, object] = {}
    if pfile.exists():
        try:
            params = parse_parameters(pfile.read_text(encoding="utf-8"), str(pfile))
        except (OSError, UnicodeDecodeError) as exc:
            raise ScenarioError(f"cannot read {pfile}: {exc}") from None
    elif path.is_dir():
        raise ScenarioError(f"{pfile} is missing: add scenario_id, workspace_mode, capture_mode")
    sid = str(params.get("scenario_id") or md.parent.resolve().name)
    if not SCENARIO_ID.match(sid):
        raise ScenarioError(f"scenario id {sid!r} (from the directory name) is not usable: "
                            "set scenario_id in parameters.json")
    return Scenario(
        scenario_id=sid,
        workspace_mode=str(params.get("workspace_mode", "empty")),
        capture_mode=str(params.get("capture_mode", "full")),
        parameters=params,
        **fields,
    )


def inline_scenario(prompt: str, scenario_id: str) -> Scenario:
    """The reference observer's usage (a bare prompt): the four POC constraints, as it emits them."""
    constraints = tuple(Constraint(cid, ctype, rule, "runner default (no scenario.md)")
                        for cid, (ctype, _section, rule) in POC_CONSTRAINTS.items())
    return Scenario(scenario_id=scenario_id, user_request=prompt, constraints=constraints)
