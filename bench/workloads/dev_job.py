"""dev_job SCRATCH_DIR N_FILES PYTHON: a developer's job on a fresh repository.

Creates a git repository of N_FILES small Python files (plus a few tests),
then runs what an agent runs around an edit: git add/commit/status/diff/log,
an edit of a tenth of the files, a second commit, `PYTHON -c` importing a
spread of stdlib modules, and a tiny `PYTHON -m pytest` run. It is the
"realistic" mix: process start-up, dynamic loading and many small opens.

The environment is pinned (no user or system git config, fixed identities and
dates, no bytecode writing, single-threaded git index) so every repetition
makes the same calls. Prints the same "ABENCH {json}" report line as the C
workloads; the clock covers the first file creation to the last command.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

FILES_PER_DIR = 100
IMPORTS = (
    "json, email.parser, http.client, xml.etree.ElementTree, argparse, sqlite3, "
    "decimal, asyncio, unittest, csv, logging.handlers, urllib.request, zipfile"
)
GIT_CONFIG = (
    "core.preloadIndex=false", "index.threads=1", "gc.auto=0", "maintenance.auto=false",
    "core.untrackedCache=false", "core.fsmonitor=false", "commit.gpgSign=false",
)
TEST_FILE = """\
import pytest


@pytest.mark.parametrize("n", range(5))
def test_square_{k}(n):
    assert n * n == n ** 2
"""


def pinned_env(home: Path) -> dict[str, str]:
    """An environment that makes git and Python behave the same every time."""
    stamp = "2024-01-01T00:00:00+0000"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PYTEST"))}
    env.update(
        HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_PAGER="cat", PAGER="cat",
        GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.invalid",
        GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp,
        PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", LC_ALL="C",
    )
    return env


def write_tree(repo: Path, n_files: int, revision: int) -> None:
    """Writes the N source files (every 10th one changes with `revision`) and the tests."""
    for i in range(n_files):
        d = repo / "src" / f"pkg{i // FILES_PER_DIR:03d}"
        if i % FILES_PER_DIR == 0:
            d.mkdir(parents=True, exist_ok=True)
        rev = revision if i % 10 == 0 else 0
        (d / f"mod{i:05d}.py").write_text(f"VALUE_{i} = {i}\nREVISION = {rev}\n")
    tests = repo / "tests"
    tests.mkdir(exist_ok=True)
    for k in range(3):
        (tests / f"test_bench_{k}.py").write_text(TEST_FILE.format(k=k))


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: dev_job.py SCRATCH_DIR N_FILES PYTHON", file=sys.stderr)
        return 2
    scratch, n_files, python = Path(argv[1]), int(argv[2]), argv[3]
    repo = scratch / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    (scratch / "home").mkdir(parents=True, exist_ok=True)
    env = pinned_env(scratch / "home")
    git = ["git", *(arg for c in GIT_CONFIG for arg in ("-c", c))]
    commands = 0

    def run(*cmd: str) -> None:
        nonlocal commands
        done = subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"dev_job: {' '.join(cmd)} exited {done.returncode}: {done.stderr}")
        commands += 1

    start = time.monotonic()
    repo.mkdir(parents=True)
    write_tree(repo, n_files, revision=0)
    run(*git, "init", "-q", "-b", "main")
    run(*git, "add", "-A")
    run(*git, "commit", "-q", "-m", "initial import")
    write_tree(repo, n_files, revision=1)
    run(*git, "status", "--porcelain")
    run(*git, "diff", "--stat")
    run(*git, "add", "-A")
    run(*git, "commit", "-q", "-m", "edit a tenth")
    run(*git, "log", "--oneline", "-n", "5")
    run(*git, "diff", "HEAD~1", "--stat")
    run(python, "-c", f"import {IMPORTS}")
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    elapsed = time.monotonic() - start

    report = {"workload": "dev_job", "elapsed_s": round(elapsed, 6),
              "ops": {"files": n_files, "commands": commands}, "expect": []}
    print("ABENCH " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
