"""check-events, rule family `black_box`: no claimed prompt or tool visibility (contract 3.3, 4.3, 4.4)."""

from __future__ import annotations

import pytest

from tests.events_support import check, load, only


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda e: e["prompt_provenance"].update(prompt_bundle={"system": "You are..."}),
     "prompt_bundle must be null"),
    (lambda e: e["prompt_provenance"].update(prompt_bundle_hash="sha256:" + "0" * 64),
     "prompt_bundle_hash must be \"unknown\""),
    (lambda e: e["model_output"].update(tool_calls=[{"name": "Edit"}]), "tool_calls must be []"),
    (lambda e: e["agent_action"].update(tool_results=[{"ok": True}]), "tool_results must be []"),
    (lambda e: e.update(observability_mode="white_box"), "observability_mode must be 'black_box'"),
])
@pytest.mark.parametrize("line", [1, 6, 9])
def test_each_visibility_claim_is_rejected_on_any_line(mutate, words: str, line: int) -> None:
    events = load()
    mutate(events[line - 1])
    found = only(check(events), "black_box")
    assert len(found) == 1 and found[0].line == line and words in found[0].message
