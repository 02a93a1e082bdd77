"""The README's exit-code table against the code: every row is read from README.md and exercised here.

A row without an exercise, or an exercise without a row, fails
`test_every_row_has_an_exercise`; each exercise runs the command the way a
user would and checks the code (and, for bad input to `run`, the one line).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.acceptance import execute
from runner.acceptance.pack import GateResult
from runner.errors import RunnerError
from tests.support import CLI, ROOT, assay, runner_env

DATA = ROOT / "tests" / "data"


def table() -> list[tuple[str, str]]:
    """(command, code) of every row of README.md's `### Exit codes` table."""
    text = (ROOT / "README.md").read_text().split("### Exit codes", 1)[1]
    return [(m[1], m[2]) for m in re.finditer(r"^\| `([a-z-]+)` \| ([^|]+?) \|", text, re.M)]


def _archive(tmp_path: Path, spool: str = "example") -> Path:
    archive = tmp_path / f"{spool}.tar.gz"
    assert assay("normalize", DATA / f"{spool}.spool", "--out", archive).returncode == 0
    return archive


def _run(tmp_path: Path, *cmd: str) -> int:
    return assay("run", "--out", tmp_path / "out", "--force", "--", *cmd).returncode


def run_own_code(tmp_path: Path) -> None:
    assert _run(tmp_path, "sh", "-c", "exit 3") == 3


def run_signal(tmp_path: Path) -> None:
    assert _run(tmp_path, "sh", "-c", "kill -TERM $$") == 128 + 15


def run_bad_input(tmp_path: Path) -> None:
    """Argparse's errors included: one line, 125, nothing created."""
    for bad in (["--pids-max", "x"], ["--sandbox", "bogus"], ["--bogus"], ["--run-id", "a.b"],
                ["--policy", str(tmp_path / "missing.toml")], ["--ringbuf-pages", "3"]):
        proc = assay("run", "--out", tmp_path / "never", *bad, "--", "true")
        assert proc.returncode == 125, (bad, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("assay-runner: error: "), proc.stderr
        assert not (tmp_path / "never").exists()


def run_not_executable(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("not a program\n")
    (tmp_path / "data.txt").chmod(0o755)
    assert _run(tmp_path, str(tmp_path / "data.txt")) == 126


def run_not_found(tmp_path: Path) -> None:
    assert _run(tmp_path, "no-such-command-for-assay-runner") == 127


def validate_valid(tmp_path: Path) -> None:
    assert assay("validate", _archive(tmp_path)).returncode == 0


def validate_invalid(tmp_path: Path) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(ROOT / "golden" / "archive-minimal", copy)
    health = copy / "observation-health.json"
    health.write_text(health.read_text().replace('"kernel_layer":"complete"', '"kernel_layer":"whole"'))
    proc = assay("validate", copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr


def validate_unusable(tmp_path: Path) -> None:
    assert assay("validate", tmp_path / "missing.tar.gz").returncode == 2


def diff_compared(tmp_path: Path) -> None:
    base, new = _archive(tmp_path), _archive(tmp_path, "threads")
    assert assay("diff", base, new).returncode == 0  # changes, and no --fail-on: 0


def diff_fail_on(tmp_path: Path) -> None:
    base, new = _archive(tmp_path), _archive(tmp_path, "threads")
    assert assay("diff", "--fail-on", "any", base, new).returncode == 1
    assert assay("diff", "--fail-on", "any", base, base).returncode == 0


def diff_unusable(tmp_path: Path) -> None:
    assert assay("diff", _archive(tmp_path), tmp_path / "missing.tar.gz").returncode == 2


def _determinism(tmp_path: Path, *args: str) -> int:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return assay("determinism", "--out", tmp_path / "det", "--workdir", work, *args).returncode


def determinism_pass(tmp_path: Path) -> None:
    assert _determinism(tmp_path, "--runs", "2", "--", "true") == 0


def determinism_differs(tmp_path: Path) -> None:
    assert _determinism(tmp_path, "--runs", "2", "--", "sh", "-c", "date +%s%N > stamp") == 1


def determinism_unusable(tmp_path: Path) -> None:
    assert _determinism(tmp_path, "--runs", "1", "--", "true") == 2


def determinism_runner_failed(tmp_path: Path) -> None:
    """A run that fails inside the runner (as a capture failure would): the check says so with 125."""
    from runner.cli import cmd_determinism, main

    def fail(_req: object) -> None:
        raise RunnerError("the capture failed")

    work = tmp_path / "work"
    work.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cmd_determinism, "execute", fail)
        assert main.main(["determinism", "--runs", "2", "--out", str(tmp_path / "det"), "--workdir",
                          str(work), "--", "true"]) == 125


def determinism_interrupted(tmp_path: Path) -> None:
    assert _determinism(tmp_path, "--runs", "2", "--", "sh", "-c", "kill -INT $$") == 130


def acceptance_could_not_run(_tmp_path: Path) -> None:
    results = [GateResult(f"g{i}", "", status, "", [], 3, None, [])
               for i, status in enumerate(("passed", "could_not_run"))]
    assert execute.exit_code(results) == 3


def show_reader_left(tmp_path: Path) -> None:
    """`show | head`, the reader gone before the output comes: one code, no traceback."""
    archive = _archive(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write show makes meets a pipe nobody reads
    try:
        proc = subprocess.run([*CLI, "show", str(archive)], stdout=write_end, stderr=subprocess.PIPE,
                              env=runner_env(), timeout=60, check=False)
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr == b"", proc.stderr


KERNEL = pytest.mark.kernel
EXERCISES: dict[tuple[str, str], tuple[Callable[[Path], None], bool]] = {
    ("run", "the command's"): (run_own_code, True),
    ("run", "128+N"): (run_signal, True),
    ("run", "125"): (run_bad_input, False),
    ("run", "126"): (run_not_executable, True),
    ("run", "127"): (run_not_found, False),
    ("validate", "0"): (validate_valid, False),
    ("validate", "1"): (validate_invalid, False),
    ("validate", "2"): (validate_unusable, False),
    ("diff", "0"): (diff_compared, False),
    ("diff", "1"): (diff_fail_on, False),
    ("diff", "2"): (diff_unusable, False),
    ("determinism", "0"): (determinism_pass, True),
    ("determinism", "1"): (determinism_differs, True),
    ("determinism", "2"): (determinism_unusable, False),
    ("determinism", "125"): (determinism_runner_failed, True),
    ("determinism", "130"): (determinism_interrupted, True),
    ("acceptance", "3"): (acceptance_could_not_run, False),
    ("show", "141"): (show_reader_left, False),
}
"""Each row's exercise, and whether it needs root (a run under the kernel monitor)."""


def test_every_row_has_an_exercise() -> None:
    rows = table()
    assert len(rows) == len(set(rows)) and rows
    assert set(rows) == set(EXERCISES)


@pytest.mark.parametrize("row", [pytest.param(row, marks=[KERNEL] if kernel else [], id=f"{row[0]}-{row[1]}")
                                 for row, (_, kernel) in EXERCISES.items()])
def test_the_row_holds(row: tuple[str, str], tmp_path: Path) -> None:
    EXERCISES[row][0](tmp_path)
