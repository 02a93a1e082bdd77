"""Bad input: one clear line, a non-zero exit, and nothing half-written."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import CLI, assay, run_cgroups, unique_run_id

pytestmark = pytest.mark.kernel


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("assay-runner: error: "), lines[0]
    return lines[0]


@pytest.fixture
def x() -> str:
    """The test's own run id: other tests and workers run beside it (tests/README.md)."""
    return unique_run_id("x")


@pytest.fixture
def out(tmp_path: Path, x: str):
    """An --out directory that must stay empty, and no cgroup of the test's run id left over."""
    d = tmp_path / "out"
    yield d
    assert not d.exists() or sorted(p.name for p in d.iterdir()) == [], list(d.iterdir())
    assert run_cgroups(x) == []


def test_no_command(out: Path, x: str) -> None:
    proc = assay("run", "--out", out, "--run-id", x)
    assert proc.returncode == 125
    assert "no command given" in _error_line(proc)


def test_missing_binary(out: Path, x: str) -> None:
    proc = assay("run", "--out", out, "--run-id", x, "--", "no-such-binary-xyz")
    assert proc.returncode == 127
    assert "command not found: no-such-binary-xyz" in _error_line(proc)


def test_not_executable(out: Path, tmp_path: Path, x: str) -> None:
    script = tmp_path / "plain.txt"
    script.write_text("echo hi\n")
    proc = assay("run", "--out", out, "--run-id", x, "--", script)
    assert proc.returncode == 126
    assert "not executable" in _error_line(proc)


BAD_RUN_IDS = ["a/b", "", "../up", ".hidden", "run.1", "run_1\n", "run 1", "rün", "x" * 129,
               "AKIA" + "IOSFODNN7EXAMPLE"]
"""Not `[A-Za-z0-9_-]{1,128}` as a whole (Assay's is_safe_run_id), or secret-shaped."""


@pytest.mark.parametrize("run_id", BAD_RUN_IDS)
def test_invalid_run_id(out: Path, run_id: str) -> None:
    proc = assay("run", "--out", out, "--run-id", run_id, "--", "true")
    assert proc.returncode == 125
    assert "invalid --run-id" in _error_line(proc)


@pytest.mark.parametrize("run_id", ["run.1", "run_1\n"])
def test_invalid_run_id_in_determinism_and_normalize(out: Path, run_id: str, tmp_path: Path) -> None:
    """The same check, up front, before any run or any spool is read (their bad-input exit, 2)."""
    proc = assay("determinism", "--runs", "3", "--out", out, "--run-id", run_id, "--", "true")
    assert proc.returncode == 2
    assert "invalid --run-id" in _error_line(proc)
    proc = assay("normalize", "--run-id", run_id, tmp_path / "missing.spool")
    assert proc.returncode == 2
    assert "invalid --run-id" in _error_line(proc)


def test_valid_run_id_characters() -> None:
    """Letters, digits, '_' and '-' only, up to 128: accepted (the command then runs)."""
    from runner.capture.inputs import check_run_id

    assert check_run_id("Run_2-x") == "Run_2-x"
    assert check_run_id("x" * 128) == "x" * 128
    assert re.fullmatch(r"run-\d{8}T\d{6}Z-[0-9a-f]{4}", check_run_id(None))


def test_unwritable_out(tmp_path: Path, x: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = assay("run", "--out", blocker / "sub", "--run-id", x, "--", "true")
    assert proc.returncode == 125
    assert "cannot write to --out" in _error_line(proc)
    assert blocker.read_text() == ""


def test_existing_archive_needs_force(tmp_path: Path, x: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    existing = out / f"{x}.tar.gz"
    existing.write_bytes(b"keep me")
    proc = assay("run", "--out", out, "--run-id", x, "--", "true")
    assert proc.returncode == 125
    assert "already exists" in _error_line(proc) and "--force" in proc.stderr
    assert existing.read_bytes() == b"keep me"
    assert sorted(p.name for p in out.iterdir()) == [f"{x}.tar.gz"]


def test_bad_ringbuf_pages(out: Path, x: str) -> None:
    proc = assay("run", "--out", out, "--run-id", x, "--ringbuf-pages", "3", "--", "true")
    assert proc.returncode == 125
    assert "power of two" in _error_line(proc)


def test_not_root(out: Path, x: str) -> None:
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *CLI,
         "run", "--out", out, "--run-id", x, "--", "true"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd="/",
    )
    assert proc.returncode == 125
    assert "needs root" in _error_line(proc)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) missing")
def test_bpf_unavailable(out: Path, x: str) -> None:
    """Root without CAP_BPF/CAP_SYS_ADMIN/CAP_PERFMON cannot load the monitor."""
    drop = "-bpf,-sys_admin,-perfmon"
    proc = subprocess.run(
        ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", *CLI,
         "run", "--out", out, "--run-id", x, "--", "true"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 125
    line = _error_line(proc)
    # CAP_SYS_ADMIN is the one named: the kernel accepts it for BPF too (docs/setup.md).
    assert "without CAP_SYS_ADMIN" in line and "--cap-add SYS_ADMIN" in line, line


def test_out_made_by_a_concurrent_run_at_the_same_moment_is_used(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs sharing one --out (CI jobs, the daemon's clients) may both find it missing: the
    second mkdir's EEXIST on a directory is not an error."""
    from runner.capture.inputs import make_dirs

    out = tmp_path / "shared" / "out"
    real_mkdir = Path.mkdir

    def raced(self: Path, mode: int = 0o777, *args: object, **kwargs: object) -> None:
        real_mkdir(self, mode)  # the other run gets there first ...
        real_mkdir(self, mode)  # ... so this one's mkdir finds it

    monkeypatch.setattr(Path, "mkdir", raced)
    make_dirs(out)
    monkeypatch.undo()
    assert out.is_dir()
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(Path, "mkdir", raced)
    with pytest.raises(FileExistsError):  # a file in the way is still an error
        make_dirs(tmp_path / "file" / "out")
