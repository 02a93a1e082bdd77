"""Forbidden patterns (contract sections 3.3, 4.3.1, 4.4.1, 4.5, 6 and 7), per line.

- `black_box`: the mode is black_box, no prompt visibility is claimed
  (prompt_bundle null, prompt_bundle_hash "unknown"), tool_calls and
  tool_results are empty (the runner uses no tools).
- `intent`: summaries and violation messages state what was observed,
  never what the agent believed, wanted or reasoned.
- `evidence`: a pass/warn/fail outcome must rest on findings that cite an
  evidence source (an artifact name or a sha256 reference), with bounded
  excerpts; a section's status must be what its findings add up to.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from blackbox.catalog import EVIDENCE_SOURCES, MAX_EVIDENCE_CHARS, MODE
from blackbox.check.base import Line, Violation, get

_RANK = {"fail": 3, "warn": 2, "unknown": 1, "pass": 0}
_SUBJECT = r"(?:the\s+)?(?:agent|model|assistant|claude|llm|ai)(?:'s)?"
_VERBS = (r"believ\w*|infer\w*|thought|think\w*|intend\w*|intent\w*|want\w*|wish\w*|decid\w*|assum\w*|"
          r"reason\w*|understo\w*|understand\w*|realiz\w*|realis\w*|meant|means\s+to|plann\w*|plans?|"
          r"chose|choos\w*|prefer\w*|expect\w*|hop\w*|tried\s+to|tries\s+to|aim\w*|goal\w*|motivat\w*|"
          r"felt|feel\w*|knew|knows?|suspect\w*|concluded|conclud\w*|guess\w*")
INTENT = re.compile(rf"\b{_SUBJECT}\s+(?:\w+\s+)?(?:{_VERBS})\b|\bchain[- ]of[- ]thought\b|"
                    r"\b(?:in order to|so that it could|because it (?:believed|thought|wanted))\b", re.I)
_SOURCE = re.compile("|".join(re.escape(s) for s in EVIDENCE_SOURCES) + r"|sha256:[0-9a-f]{64}")


def cites_source(evidence: Any) -> bool:
    """Does the evidence string name an evidence artifact or a sha256 reference?"""
    return isinstance(evidence, str) and bool(_SOURCE.search(evidence))


def black_box(ev: dict[str, Any]) -> Iterator[str]:
    if "observability_mode" in ev and ev["observability_mode"] != MODE:
        yield f"observability_mode must be {MODE!r}, got {ev['observability_mode']!r}"
    prov = ev.get("prompt_provenance")
    if isinstance(prov, dict):
        if prov.get("prompt_bundle") is not None:
            yield "prompt_provenance.prompt_bundle must be null in black-box mode (it claims prompt access)"
        if "prompt_bundle_hash" in prov and prov["prompt_bundle_hash"] != "unknown":
            yield "prompt_provenance.prompt_bundle_hash must be \"unknown\" in black-box mode"
    if get(ev, "model_output", "tool_calls"):
        yield "model_output.tool_calls must be [] in black-box mode (it claims tool-call visibility)"
    if get(ev, "agent_action", "tool_results"):
        yield "agent_action.tool_results must be [] in black-box mode (the runner uses no tools)"


def intent(ev: dict[str, Any]) -> Iterator[str]:
    texts = [("agent_action.action_summary", get(ev, "agent_action", "action_summary"))]
    for n, art in enumerate(get(ev, "agent_action", "artifacts") or []):
        texts.append((f"agent_action.artifacts[{n}].summary", get(art, "summary")))
    for section in ("alignment", "quality", "policy"):
        for n, v in enumerate(get(ev, "evaluation", section, "violations") or []):
            texts.append((f"evaluation.{section}.violations[{n}].message", get(v, "message")))
    for path, text in texts:
        m = INTENT.search(text) if isinstance(text, str) else None
        if m:
            yield f"{path} invents reasoning or intent ({m.group(0)!r}): state what was observed"


def _findings(section: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(where, status, evidence) of each check and violation of an evaluation section."""
    out = [(f"checks[{n}]", c.get("status"), c.get("evidence"))
           for n, c in enumerate(section.get("checks") or []) if isinstance(c, dict)]
    out += [(f"violations[{n}]", v.get("severity"), v.get("evidence"))
            for n, v in enumerate(section.get("violations") or []) if isinstance(v, dict)]
    return out


def evidence(ev: dict[str, Any]) -> Iterator[str]:
    evaluation = ev.get("evaluation")
    if not isinstance(evaluation, dict):
        return
    for name in ("alignment", "quality", "policy"):
        section = evaluation.get(name)
        if not isinstance(section, dict):
            continue
        status = section.get("status")
        findings = _findings(section)
        for kind, fstatus, text in findings:
            if isinstance(text, str) and len(text) > MAX_EVIDENCE_CHARS:
                yield (f"evaluation.{name}.{kind}.evidence is {len(text)} characters; "
                       f"excerpts must be short (<= {MAX_EVIDENCE_CHARS}), reference by hash instead")
            if fstatus in _RANK and fstatus != "unknown" and not cites_source(text):
                yield (f"evaluation.{name}.{kind} is {fstatus} but cites no evidence source "
                       f"({', '.join(EVIDENCE_SOURCES)} or sha256:...)")
        if status not in _RANK or status == "unknown":
            continue
        decided = [f for f in findings if f[1] in _RANK]
        if not any(cites_source(text) for _k, s, text in decided if s != "unknown"):
            yield f"evaluation.{name}.status is {status!r} without any finding that cites evidence"
            continue
        worst = max((f[1] for f in decided), key=_RANK.__getitem__)
        if worst != status:
            yield f"evaluation.{name}.status is {status!r} but its findings add up to {worst!r}"


FAMILIES = (("black_box", black_box), ("intent", intent), ("evidence", evidence))


def check(line: Line) -> list[Violation]:
    assert line.event is not None
    return [Violation(line.number, rule, msg) for rule, fn in FAMILIES for msg in fn(line.event)]
