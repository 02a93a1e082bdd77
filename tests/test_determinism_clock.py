"""`determinism` pins the clock inputs (runner/evidence/clock.py): a `git commit` job passes the
gate with nothing set by the caller, and fails without the pin, naming the commit object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.evidence.clock import CLOCK_ENV, pin_clock
from tests.support import assay, runner_env

GIT_JOB = "git init -q r && cd r && echo a > f && touch -d @946684800 f && git add f && git commit -qm x"
"""The commit job, with f's mtime pinned before `git add`: git's racily-clean check re-reads a file
modified in the same second as the index, so without the pin a run in which a second boundary falls
between writing f and writing the index reads f once less than the others (docs/determinism.md,
"What makes a command nondeterministic"); that difference is the job's, and determinism rightly reports it."""


def _caller_env(home: Path) -> dict[str, str]:
    """The test's environment without any clock variable. HOME holds a git identity, as a user's does:
    without one `git commit` fails the same way in every run, which would prove nothing."""
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Test User\n\temail = test@example.invalid\n")
    env = runner_env(HOME=str(home))
    return {k: v for k, v in env.items() if k not in CLOCK_ENV and not k.startswith("GIT_")}


def _determinism(tmp_path: Path, *extra: str, job: str = GIT_JOB) -> tuple[int, str, dict]:
    work = tmp_path / "work"
    work.mkdir()
    proc = assay("determinism", "--runs", "3", "--run-id", "gitjob", "--out", tmp_path / "out",
                 "--workdir", work, *extra, "--", "sh", "-c", job, env=_caller_env(tmp_path / "home"))
    assert proc.returncode != 125, proc.stderr
    report = json.loads((tmp_path / "out" / "determinism-report.json").read_text())
    return proc.returncode, proc.stdout, report


@pytest.mark.kernel
def test_a_git_commit_job_passes_with_the_clock_pinned(tmp_path: Path) -> None:
    code, stdout, report = _determinism(tmp_path)
    assert code == 0, stdout
    assert [r["exit_code"] for r in report["runs"]] == [0, 0, 0]  # the commit was made, every time
    assert report["passed"] and report["workdir_identical"]
    assert report["pinned_clock"] == [f"{name}={value}" for name, value in CLOCK_ENV.items()]
    assert "clock pinned: SOURCE_DATE_EPOCH=" in stdout


@pytest.mark.kernel
def test_without_the_pin_the_commit_time_makes_runs_differ(tmp_path: Path) -> None:
    # each run takes over a second, so no two commits can fall in the same second by chance
    code, stdout, report = _determinism(tmp_path, "--no-pin-time", job=f"sleep 1.1 && {GIT_JOB}")
    assert code == 1, stdout
    assert report["pinned_clock"] == [] and not report["passed"]
    assert [r["exit_code"] for r in report["runs"]] == [0, 0, 0]
    assert any(d["path"].startswith("r/.git/objects/") for d in report["workdir_differences"])
    assert "clock pinned: nothing (--no-pin-time)" in stdout


def test_the_callers_values_are_kept_and_said() -> None:
    env, said = pin_clock({"SOURCE_DATE_EPOCH": "1", "PATH": "/bin"})
    assert env["SOURCE_DATE_EPOCH"] == "1" and env["PATH"] == "/bin"
    assert all(env[name] == value for name, value in CLOCK_ENV.items() if name != "SOURCE_DATE_EPOCH")
    assert said[0] == "SOURCE_DATE_EPOCH=1 (the caller's)"
