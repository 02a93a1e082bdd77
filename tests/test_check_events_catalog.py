"""check-events, rule family `catalog`: what each of the nine black-box events must carry."""

from __future__ import annotations

import pytest

from tests.events_support import by_name, check, load, only


def _catalog(events: list[dict]) -> list[tuple[int, str]]:
    return [(v.line, v.message) for v in only(check(events), "catalog")]


@pytest.mark.parametrize(("name", "action", "allowed"), [
    ("run_started", "plan", "other"), ("agent_invoked", "edit", "other|plan"),
    ("fs_diff_captured", "no_op", "edit"), ("commands_observed", "other", "command|run_tests"),
])
def test_action_type_per_event(name: str, action: str, allowed: str) -> None:
    events = load()
    ev = by_name(events, name)
    ev["agent_action"]["action_type"] = action
    expected = f"{name}: action_type must be {allowed}, got {action!r}"
    assert _catalog(events) == [(events.index(ev) + 1, expected)]


@pytest.mark.parametrize(("name", "summary", "missing"), [
    ("run_started", "run started", "the run_id and scenario_id"),
    ("agent_invoked", "agent process started", "verbose on/off and cwd"),
    ("agent_completed", "agent process ended: exit_code=0", "the exit code and duration"),
])
def test_summaries_carry_what_the_catalog_requires(name: str, summary: str, missing: str) -> None:
    events = load()
    by_name(events, name)["agent_action"]["action_summary"] = summary
    assert any(missing in m for _, m in _catalog(events))


def test_process_artifacts_and_no_output_in_agent_completed() -> None:
    events = load()
    del by_name(events, "agent_invoked")["agent_action"]["artifacts"][0]["metadata"]["argv"]
    by_name(events, "agent_completed")["model_output"]["output_raw"] = "hello"
    assert _catalog(events) == [
        (3, "agent_invoked: the process artifact's metadata lacks argv"),
        (4, "agent_completed: must not embed stdout/stderr (they are captured in artifacts_captured)"),
    ]


def test_stdout_stderr_artifacts_are_marked_declared() -> None:
    events = load()
    arts = by_name(events, "artifacts_captured")["agent_action"]["artifacts"]
    arts[0]["metadata"]["non_normative"] = False
    arts[1]["hash"] = "md5:abc"
    assert _catalog(events) == [
        (5, "artifacts_captured: the claude_stderr.txt artifact needs a sha256: hash"),
        (5, "artifacts_captured: the claude_stdout.txt artifact must mark metadata.non_normative: true "
            "(declared output)"),
    ]


def test_diff_and_command_log_metadata() -> None:
    events = load()
    meta = by_name(events, "fs_diff_captured")["agent_action"]["artifacts"][0]["metadata"]
    meta["method"] = "rsync"
    del meta["total_changed"]
    cmeta = by_name(events, "commands_observed")["agent_action"]["artifacts"][0]["metadata"]
    del cmeta["observed_count"]
    del cmeta["coverage"]
    assert [m for _, m in _catalog(events)] == [
        "fs_diff_captured: the diff artifact's metadata must count total_changed",
        "fs_diff_captured: the diff artifact's metadata.method must be diff_ru|git_diff|other",
        "commands_observed: the command_log artifact's metadata must give observed_count",
        "commands_observed: the command_log artifact's metadata must say what the log covers (coverage)",
    ]


def test_unavailable_commands_must_say_why() -> None:
    events = load()
    ev = events[6]
    ev["event"] = "commands_observation_unavailable"
    ev["agent_action"].update(action_type="other", artifacts=[], action_summary="no commands")
    why = ("commands_observation_unavailable: action_summary must state why "
           "(wrappers disabled | no wrapped binaries invoked | permission issue | unknown)")
    assert (7, why) in _catalog(events)


def test_run_finished_states_the_evaluated_statuses() -> None:
    events = load("fail")
    fin = by_name(events, "run_finished")
    summary = fin["agent_action"]["action_summary"]
    fin["agent_action"]["action_summary"] = summary.replace("policy=fail", "policy=pass")
    assert _catalog(events) == [(9, "run_finished: action_summary must state policy=fail")]
