"""check-events --verify-artifacts, rule family `integrity`: referenced files exist and match their hashes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from blackbox.check import check_file
from tests.events_support import by_name, dump, load


def _run_dir(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A run directory whose artifacts are the recorded hashes' files, rebuilt to match."""
    events = load()
    for ev in events:
        for art in ev["agent_action"]["artifacts"]:
            ref = art["content_ref"]
            if ref and not ref.endswith("/"):
                data = f"content of {ref}\n".encode()
                (tmp_path / ref).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / ref).write_bytes(data)
                art["hash"] = f"sha256:{hashlib.sha256(data).hexdigest()}"
    (tmp_path / "events.jsonl").write_bytes(dump(events))
    return tmp_path / "events.jsonl", events


def test_matching_files_pass_and_the_check_is_opt_in(tmp_path: Path) -> None:
    path, _ = _run_dir(tmp_path)
    assert check_file(path, verify_artifacts=True) == []
    (tmp_path / "artifacts" / "fs_diff.patch").unlink()
    assert check_file(path) == []  # without the option the events file is judged alone


def test_changed_missing_and_escaping_artifacts(tmp_path: Path) -> None:
    path, events = _run_dir(tmp_path)
    (tmp_path / "artifacts" / "claude_stdout.txt").write_text("edited after the run\n")
    (tmp_path / "artifacts" / "command_logs.jsonl").unlink()
    by_name(events, "fs_diff_captured")["agent_action"]["artifacts"][0]["content_ref"] = "../../etc/passwd"
    path.write_bytes(dump(events))
    found = [(v.line, v.rule, v.message) for v in check_file(path, verify_artifacts=True)
             if v.rule == "integrity"]
    assert found == [
        (5, "integrity", "agent_action.artifacts[0] (artifacts/claude_stdout.txt) does not match its hash: "
                         "the file changed after the event was written"),
        (6, "integrity", "agent_action.artifacts[0] (../../etc/passwd) points outside the run directory"),
        (7, "integrity", "agent_action.artifacts[0] (artifacts/command_logs.jsonl) is missing beside the "
                         "events file"),
    ]
