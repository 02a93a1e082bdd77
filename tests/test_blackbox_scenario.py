"""Scenario parsing: scenario.md sections, constraint mapping, parameters.json, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from blackbox.scenario import ScenarioError, load_scenario, map_constraint, parse_parameters

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "fixtures" / "scenarios" / "summarize-logs"


def test_fixture_scenario() -> None:
    sc = load_scenario(SCENARIO)
    assert sc.scenario_id == "summarize-logs-v1"
    assert (sc.workspace_mode, sc.capture_mode) == ("empty", "full")
    assert sc.user_request.startswith("Add a command `summarize-logs`")
    assert sc.user_request.endswith("Answer with JSON only, and no emojis.")
    assert [(c.id, c.type) for c in sc.constraints] == [
        ("output.json_only", "format"), ("style.no_emojis", "style"),
        ("scope.no_ci_changes", "scope"), ("quality.tests_required", "quality")]
    assert sc.constraints[2].rule == "The CI configuration must not be modified"
    assert len(sc.prohibited_actions) == 2 and len(sc.success_criteria) == 2


@pytest.mark.parametrize(("line", "cid"), [
    ("Output must be valid JSON", "output.json_only"),
    ("No emojis allowed", "style.no_emojis"),
    ("Do not touch .github workflows", "scope.no_ci_changes"),
    ("CI configuration must not be modified", "scope.no_ci_changes"),
    ("Unit tests must be added", "quality.tests_required"),
    ("Use Python 3.11 only", "other.use_python_3_11_only"),
])
def test_constraint_lines_map_onto_the_vocabulary(line: str, cid: str) -> None:
    c = map_constraint(line)
    assert c.id == cid and c.rule == line


def test_unknown_constraints_are_kept_as_other(tmp_path: Path) -> None:
    (tmp_path / "scenario.md").write_text(
        "## User Request (Raw)\nDo it.\n\n## Explicit Constraints\n- Keep functions short\n"
        "- No emojis\n- no EMOJI please\n")
    sc = load_scenario(tmp_path / "scenario.md")
    assert [(c.id, c.type) for c in sc.constraints] == [
        ("other.keep_functions_short", "other"), ("style.no_emojis", "style")]
    assert sc.scenario_id == tmp_path.name


def test_missing_request_section_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "scenario.md").write_text("## Objective\nSomething\n")
    (tmp_path / "parameters.json").write_text("{}")
    with pytest.raises(ScenarioError, match=r"no '## User Request \(Raw\)' section"):
        load_scenario(tmp_path)


@pytest.mark.parametrize(("text", "words"), [
    ("{", "not valid JSON"),
    ("[]", "must be a JSON object"),
    ('{"workspace_mode": "copy"}', "workspace_mode 'copy' must be one of empty|existing"),
    ('{"capture_mode": "secret"}', "capture_mode 'secret' must be one of full|redacted|hashed"),
    ('{"scenario_id": "../x"}', "scenario_id '../x' must be"),
])
def test_bad_parameters(text: str, words: str) -> None:
    with pytest.raises(ScenarioError, match=r"parameters\.json: ") as err:
        parse_parameters(text)
    assert words in str(err.value)


def test_directory_without_parameters_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "scenario.md").write_text("## User Request (Raw)\nDo it.\n")
    with pytest.raises(ScenarioError, match=r"parameters\.json is missing"):
        load_scenario(tmp_path)
