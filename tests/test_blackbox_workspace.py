"""The workspace as a git repository, and a diff the agent cannot hide changes from."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from runner.blackbox.steps import read_kernel
from runner.blackbox.workspace import diff as workspace_diff
from runner.blackbox.workspace import git, prepare


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / ".git").mkdir(parents=True)  # the source's own repository is not copied
    (src / ".git" / "HEAD").write_text("ref: refs/heads/x\n")
    (src / "app.py").write_text("print(1)\n")
    (src / ".gitignore").write_text("*.log\n")
    return src


def test_existing_workspace_is_a_git_repo_with_a_deterministic_baseline(tmp_path: Path) -> None:
    src = _source(tmp_path)
    first, second = tmp_path / "r1", tmp_path / "r2"
    first.mkdir()
    second.mkdir()
    a, b = prepare(first, "existing", src, None), prepare(second, "existing", src, None)
    assert a.files == 2 and a.tree_hash == b.tree_hash
    head = [git("rev-parse", "HEAD", cwd=ws.root).stdout for ws in (a, b)]
    assert head[0] == head[1]  # fixed identity and date
    assert (a.root / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"


def test_the_agent_cannot_hide_changes_from_the_diff(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    ws = prepare(run, "existing", _source(tmp_path), None)
    (ws.root / "secret.log").write_text("ignored by .gitignore\n")
    (ws.root / ".gitignore").write_text("*\n")
    (ws.root / "app.py").write_text("print(2)\n")
    subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "agent"],
                   cwd=ws.root, check=True)
    shutil.rmtree(ws.root / ".git")
    facts = workspace_diff(ws, run / "fs_diff.patch")
    assert [(c.status, c.path) for c in facts.changes] == [
        ("M", ".gitignore"), ("M", "app.py"), ("A", "secret.log")]
    assert b"+ignored by .gitignore" in (run / "fs_diff.patch").read_bytes()


def test_names_with_any_byte_are_listed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    ws = prepare(run, "empty", None, None)
    (ws.root / "tab\tand\nnewline").write_text("x\n")
    with open(bytes(ws.root) + b"/\xff.txt", "w") as f:
        f.write("y\n")
    facts = workspace_diff(ws, run / "fs_diff.patch")
    assert sorted(c.path for c in facts.changes) == sorted(["tab\tand\nnewline", "\\xff.txt"])


def test_a_diff_that_cannot_be_made_is_unavailable_not_empty(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    ws = prepare(run, "empty", None, None)
    shutil.rmtree(ws.baseline)
    facts = workspace_diff(ws, run / "fs_diff.patch")
    assert not facts.available and facts.error.startswith("git add failed")


def test_an_unreadable_spool_means_no_command_log(tmp_path: Path) -> None:
    bad = tmp_path / "x.spool"
    bad.write_bytes(b"\x00\x00\x00\x10not a spool")
    facts = read_kernel(bad)
    assert facts.log is None and facts.error.startswith("spool unreadable:")
