"""check-events, rule family `evidence`: outcomes rest on cited, bounded evidence (contract 6 and 7)."""

from __future__ import annotations

from tests.events_support import by_name, check, load, only


def _evaluation(events: list[dict]) -> dict:
    return by_name(events, "evaluation_performed")["evaluation"]


def test_pass_check_without_an_evidence_source_is_rejected() -> None:
    events = load()
    _evaluation(events)["policy"]["checks"][0]["evidence"] = "looks fine"
    found = only(check(events), "evidence")
    assert [v.line for v in found] == [8]
    assert "evaluation.policy.checks[0] is pass but cites no evidence source" in found[0].message
    _evaluation(events)["policy"]["checks"][1]["evidence"] = "also fine"
    found = only(check(events), "evidence")
    assert len(found) == 3
    assert any(v.message == "evaluation.policy.status is 'pass' without any finding that cites evidence"
               for v in found)


def test_section_status_without_any_finding_is_rejected() -> None:
    events = load()
    events[3]["evaluation"]["quality"]["status"] = "pass"  # agent_completed, no checks at all
    found = only(check(events), "evidence")
    assert [(v.line, v.message) for v in found] == [
        (4, "evaluation.quality.status is 'pass' without any finding that cites evidence")]


def test_fail_violation_without_evidence_source_is_rejected() -> None:
    events = load("fail")
    _evaluation(events)["alignment"]["violations"][0]["evidence"] = "it was not JSON"
    found = only(check(events), "evidence")
    assert len(found) == 1
    assert "alignment.violations[0] is fail but cites no evidence source" in found[0].message


def test_status_must_add_up_from_its_findings() -> None:
    events = load("fail")
    _evaluation(events)["policy"]["status"] = "warn"
    found = [v for v in check(events) if v.rule == "evidence"]
    assert [v.message for v in found] == [
        "evaluation.policy.status is 'warn' but its findings add up to 'fail'"]


def test_unbounded_evidence_is_rejected_and_a_hash_reference_counts_as_a_source() -> None:
    events = load()
    checks = _evaluation(events)["policy"]["checks"]
    checks[0]["evidence"] = "claude_stdout.txt: " + "x" * 500
    checks[1]["evidence"] = "sha256:" + "ab" * 32
    found = only(check(events), "evidence")
    assert len(found) == 1 and "excerpts must be short" in found[0].message


def test_unknown_needs_no_evidence() -> None:
    events = load()
    ev = _evaluation(events)
    ev["policy"]["checks"][0].update(status="unknown", evidence="no output")
    ev["policy"]["checks"][1].update(status="unknown", evidence="no diff")
    ev["policy"]["status"] = "unknown"
    fin = by_name(events, "run_finished")
    fin["evaluation"] = ev
    fin["agent_action"]["action_summary"] = fin["agent_action"]["action_summary"].replace(
        "policy=pass", "policy=unknown")
    assert check(events) == []
