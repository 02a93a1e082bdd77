"""check-events, rule family `intent`: summaries state observations, never invented reasoning (contract 6)."""

from __future__ import annotations

import pytest

from blackbox.check.patterns import INTENT
from tests.events_support import check, load, only

INVENTED = [
    "the agent believed the tests were flaky",
    "agent inferred that CI was broken",
    "Claude decided to skip the tests",
    "the model wanted to refactor first",
    "agent's reasoning: the log format is JSON",
    "edited main.py in order to pass the tests",
    "the assistant then assumed a Python project",
    "chain-of-thought shows a plan",
]
OBSERVED = [
    "agent process started: verbose=off cwd=workspace (under the kernel monitor)",
    "agent process ended: exit_code=1 duration_ms=20 (exited:1)",
    "3 path(s) changed in the workspace",
    "7 command(s) observed by the kernel (test_runner=1, shell=1)",
    "stdout and stderr persisted as artifacts (declared, non-normative)",
]


@pytest.mark.parametrize("summary", INVENTED)
def test_invented_intent_in_action_summary_is_rejected(summary: str) -> None:
    events = load()
    events[5]["agent_action"]["action_summary"] = summary
    found = only(check(events), "intent")
    assert [v.line for v in found] == [6]
    assert "invents reasoning or intent" in found[0].message


def test_invented_intent_in_an_artifact_summary_is_rejected() -> None:
    events = load()
    events[4]["agent_action"]["artifacts"][0]["summary"] = "what the agent thought it printed"
    found = only(check(events), "intent")
    assert [(v.line, v.message.split(" invents")[0]) for v in found] == [
        (5, "agent_action.artifacts[0].summary")]


@pytest.mark.parametrize("summary", OBSERVED)
def test_observational_wording_passes(summary: str) -> None:
    assert INTENT.search(summary) is None


def test_invented_intent_in_a_violation_message_is_rejected() -> None:
    events = load("fail")
    violation = events[7]["evaluation"]["alignment"]["violations"][0]
    violation["message"] = "the agent decided prose was clearer"
    found = only(check(events), "intent")
    assert [(v.line, v.message.split(" invents")[0]) for v in found] == [
        (8, "evaluation.alignment.violations[0].message")]
