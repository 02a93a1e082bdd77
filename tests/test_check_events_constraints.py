"""check-events, rule family `constraints`: typed, emitted before evaluated, all evaluated (4.2.2)."""

from __future__ import annotations

from tests.events_support import by_name, check, load


def test_constraints_are_typed_evaluated_and_only_evaluated_when_emitted() -> None:
    events = load()
    prepared = by_name(events, "workspace_prepared")
    prepared["request"]["constraints"][1]["type"] = "format"  # style.no_emojis
    extra = {"id": "scope.no_deploys", "type": "scope", "rule": "no deploys"}
    prepared["request"]["constraints"].append(extra)
    evaluation = by_name(events, "evaluation_performed")["evaluation"]
    evaluation["quality"]["checks"].append(
        {"id": "quality.lint_clean", "status": "unknown", "evidence": "no mechanical check"})
    evaluation["alignment"]["checks"][0]["id"] = "output.json_only_renamed"
    evaluation["quality"]["checks"][0]["id"] = "scope.no_ci_changes"
    found = [(v.line, v.message) for v in check(events) if v.rule == "constraints"]
    assert found == [
        (2, "style.no_emojis must have type 'style', got 'format'"),
        (8, "constraint output.json_only was emitted but never evaluated"),
        (8, "constraint quality.tests_required was emitted but never evaluated"),
        (8, "constraint scope.no_deploys was emitted but never evaluated"),
        (8, "output.json_only_renamed is evaluated but no event emitted it as a constraint"),
        (8, "quality.lint_clean is evaluated but no event emitted it as a constraint"),
    ]
