"""`check-events` and `observe` on the command line: output shape, exit codes, one-line input errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.events_support import DATA, dump, load
from tests.support import ROOT, assay

SCENARIO = ROOT / "fixtures" / "scenarios" / "summarize-logs"


def test_check_events_valid_file() -> None:
    proc = assay("check-events", DATA / "pass.events.jsonl")
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.strip().endswith("pass.events.jsonl: valid")


def test_check_events_prints_each_violation_with_file_and_line(tmp_path: Path) -> None:
    events = load()
    events[2]["prompt_provenance"]["prompt_bundle"] = {"system": "..."}
    events[6]["model_output"]["tool_calls"] = [{"name": "Bash"}]
    path = tmp_path / "events.jsonl"
    path.write_bytes(dump(events))
    proc = assay("check-events", path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"{path}:3: [black_box] prompt_provenance.prompt_bundle must be null in black-box mode "
        "(it claims prompt access)",
        f"{path}:7: [black_box] model_output.tool_calls must be [] in black-box mode "
        "(it claims tool-call visibility)",
    ]
    assert proc.stderr.strip() == f"{path}: 2 violation(s)"


def test_check_events_unreadable_file(tmp_path: Path) -> None:
    proc = assay("check-events", tmp_path / "missing.jsonl")
    assert proc.returncode == 2
    missing = tmp_path / "missing.jsonl"
    assert proc.stderr.strip() == f"assay-runner: error: cannot read {missing}: No such file or directory"


@pytest.mark.parametrize(("args", "message"), [
    ((), "nothing to ask the agent: give --scenario PATH or a PROMPT"),
    (("--scenario", SCENARIO, "a prompt"), "give either --scenario or a PROMPT, not both"),
    (("two", "words"), "one PROMPT at most (quote it); unexpected 'words' before '--'"),
    (("--scenario", ROOT / "nowhere"), "cannot read scenario"),
    (("--scenario", SCENARIO, "--workspace-source", ROOT / "nowhere"), "workspace mode 'existing' needs"),
    (("--scenario", SCENARIO, "--workspace-mode", "existing"), "workspace mode 'existing' needs"),
    (("do it", "--scenario-id", "../up"), "--scenario-id '../up': use 1-128 letters"),
    (("do it", "--run-id", "a/b"), "invalid --run-id 'a/b'"),
    (("do it", "--timeout", "0"), "--timeout must be a positive number of seconds, got 0.0"),
])
def test_observe_input_errors_are_one_line(tmp_path: Path, args: tuple, message: str) -> None:
    runs = tmp_path / "runs"
    proc = assay("observe", *args, "--runs-root", runs)
    assert proc.returncode == 125
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("assay-runner: error: ") and message in lines[0], lines
    assert not runs.exists()


def test_observe_refuses_an_existing_run_directory(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    proc = assay("observe", "do it", "--runs-root", tmp_path, "--run-id", "r1")
    assert proc.returncode == 125
    assert "already exists: choose another --run-id" in proc.stderr
    assert list((tmp_path / "r1").iterdir()) == []


def test_check_events_never_prints_a_raw_control_character(tmp_path: Path) -> None:
    events = load()
    events[4]["event"] = "evil\x1b[2J\x07"
    events[7]["evaluation"]["policy"]["status"] = "\x1b]0;x\x07"  # echoed by the run_finished rule
    path = tmp_path / "events.jsonl"
    path.write_bytes(dump(events))
    proc = assay("check-events", path)
    assert proc.returncode == 1 and proc.stdout
    assert not any(ch in proc.stdout for ch in "\x1b\x07")
    assert "run_finished: action_summary must state policy=\\x1b]0;x\\x07" in proc.stdout
