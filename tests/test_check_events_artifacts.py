"""check-events, rule family `artifacts`: the run references stdout, stderr and the diff (contract 4.5.2)."""

from __future__ import annotations

from tests.events_support import by_name, check, load


def test_required_artifacts_are_referenced() -> None:
    events = load()
    by_name(events, "artifacts_captured")["agent_action"]["artifacts"] = []
    found = [(v.line, v.message) for v in check(events) if v.rule == "artifacts"]
    assert found == [(9, "the run never references claude_stderr.txt (stderr_log)"),
                     (9, "the run never references claude_stdout.txt (stdout_log)")]
