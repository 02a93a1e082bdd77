"""Command-line paths no other test walked: global options, defaults, overwriting, presets, Ctrl-C.

Each test drives the real CLI as a user would. The kernel ones run the real
runner; each uses its own run id (support.unique_run_id) and tmp_path, and
the one that writes to the default `--out` removes exactly what it wrote.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import __version__
from runner.cli.cmd_run import DEFAULT_OUT
from tests.support import CLI, ROOT, Archive, assay, run_cgroups, run_observed, runner_env, unique_run_id


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("{")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("assay-runner: error: "), lines[0]
    return lines[0]


# -- without root ----------------------------------------------------------------------------


def test_version_is_the_package_version() -> None:
    proc = assay("--version")
    assert proc.returncode == 0, proc.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert proc.stdout == f"assay-runner {project}\n" == f"assay-runner {__version__}\n"


def test_policy_and_sandbox_together_are_refused(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[filesystem]\nread = ["/"]\n')
    out = tmp_path / "out"
    proc = assay("run", "--out", out, "--policy", policy, "--sandbox", "read-only", "--", "true")
    assert proc.returncode == 125  # bad input to run: 125 and one line, argparse's errors too
    assert proc.stderr.count("\n") == 1
    assert "argument --sandbox: not allowed with argument --policy" in proc.stderr
    assert not out.exists()


def test_normalize_a_missing_spool(tmp_path: Path) -> None:
    proc = assay("normalize", tmp_path / "missing.spool", "--out", tmp_path / "a.tar.gz")
    assert proc.returncode == 2
    assert error_line(proc) == f"assay-runner: error: no such spool: {tmp_path / 'missing.spool'}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", [b"", b"\x00" * 7, secrets.token_bytes(3000), b"not a spool\n" * 50])
def test_normalize_a_corrupt_spool(tmp_path: Path, content: bytes) -> None:
    spool = tmp_path / "bad.spool"
    spool.write_bytes(content)
    proc = assay("normalize", spool, "--out", tmp_path / "a.tar.gz")
    assert proc.returncode == 2, proc.stderr
    assert error_line(proc).startswith(f"assay-runner: error: cannot normalize {spool}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.spool"]  # nothing half-written


def test_normalize_a_truncated_real_spool(tmp_path: Path) -> None:
    whole = (ROOT / "tests" / "data" / "example.spool").read_bytes()
    spool = tmp_path / "cut.spool"
    spool.write_bytes(whole[: len(whole) // 2])
    proc = assay("normalize", spool, "--out", tmp_path / "a.tar.gz")
    assert proc.returncode == 2, proc.stderr
    assert error_line(proc).startswith(f"assay-runner: error: cannot normalize {spool}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.spool"]


# -- against the kernel ----------------------------------------------------------------------


@pytest.mark.kernel
@pytest.mark.parametrize("fmt", ["json", "console", "default"])
def test_log_format(tmp_path: Path, fmt: str) -> None:
    """json: every log line is a JSON object, info included; console, and the default on a pipe even
    under CI (a container without -t): text, warnings only."""
    run_id = unique_run_id("logfmt")
    args = ["run", "--out", tmp_path, "--run-id", run_id, "--workdir", tmp_path, "--", "true"]
    if fmt == "default":
        proc = subprocess.run([*CLI, *map(str, args)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, env=runner_env(CI="true"), stdin=subprocess.DEVNULL)
        assert "run.evidence_unprotected" in proc.stderr  # the warning a root run without policy gets
    else:
        proc = assay("--log-format", fmt, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    logs = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    if fmt == "json":
        assert "monitor.attached" in {entry["event"] for entry in logs}
        assert all({"event", "level", "timestamp"} <= entry.keys() for entry in logs)
    else:
        assert logs == []
        assert "monitor.attached" not in proc.stderr  # info is for -v on a console
    assert (tmp_path / f"{run_id}.tar.gz").is_file()


@pytest.mark.kernel
def test_unknown_user_is_one_line_and_nothing_runs(tmp_path: Path) -> None:
    run_id = unique_run_id("nouser")
    user = f"no-such-user-{secrets.token_hex(3)}"
    out = tmp_path / "out"
    marker = tmp_path / "ran"
    proc = assay("run", "--out", out, "--run-id", run_id, "--user", user, "--", "touch", marker)
    assert proc.returncode == 125, proc.stderr
    assert error_line(proc) == f"assay-runner: error: --user {user}: no such user on this machine"
    assert not out.exists() and not marker.exists()
    assert run_cgroups(run_id) == []


@pytest.fixture
def default_out_archives() -> Iterator[list[Path]]:
    """Archives a test wrote to the default --out (/var/lib/assay-runner/runs): removed after,
    with their spools; nothing else in that shared directory is touched."""
    written: list[Path] = []
    yield written
    for archive in written:
        archive.unlink(missing_ok=True)
        archive.with_name(archive.name.removesuffix(".tar.gz") + ".spool").unlink(missing_ok=True)


@pytest.mark.kernel
def test_generated_run_id_and_default_out(tmp_path: Path, default_out_archives: list[Path]) -> None:
    proc = assay("run", "--workdir", tmp_path, "--", "sh", "-c", "echo hi > made.txt", cwd=tmp_path)
    match = re.search(r"^\s*archive:\s+(\S+)$", proc.stderr, re.MULTILINE)
    assert match, proc.stderr
    archive = Path(match.group(1))
    default_out_archives.append(archive)
    assert proc.returncode == 0, proc.stderr
    assert archive.parent == DEFAULT_OUT
    run_id = archive.name.removesuffix(".tar.gz")
    assert re.fullmatch(r"run-\d{8}T\d{6}Z-[0-9a-f]{4}", run_id)
    assert archive.with_name(f"{run_id}.spool").is_file()
    written = Archive(archive)
    assert str(tmp_path / "made.txt") in written.values("openat")
    assert json.loads(written.members["manifest.json"])["run_id"] == run_id
    assert DEFAULT_OUT.stat().st_uid == 0 and DEFAULT_OUT.stat().st_mode & 0o022 == 0


@pytest.mark.kernel
def test_force_really_overwrites(tmp_path: Path) -> None:
    """The second run's archive and spool replace the first's: new evidence, nothing of the old."""
    run_id = unique_run_id("force")
    first = run_observed(tmp_path, run_id, "sh", "-c", "echo one > first.txt", workdir=tmp_path)
    assert first.returncode == 0, first.stderr
    old = (tmp_path / f"{run_id}.tar.gz").read_bytes()
    old_spool = (tmp_path / f"{run_id}.spool").read_bytes()
    refused = assay("run", "--out", tmp_path, "--run-id", run_id, "--workdir", tmp_path, "--", "true")
    assert refused.returncode == 125 and "--force" in refused.stderr
    assert (tmp_path / f"{run_id}.tar.gz").read_bytes() == old

    second = run_observed(tmp_path, run_id, "sh", "-c", "echo two > second.txt", workdir=tmp_path)
    assert second.returncode == 0, second.stderr
    archive = Archive(tmp_path / f"{run_id}.tar.gz")
    assert archive.path.read_bytes() != old
    assert (tmp_path / f"{run_id}.spool").read_bytes() != old_spool
    opened = archive.values("openat")
    assert str(tmp_path / "second.txt") in opened and str(tmp_path / "first.txt") not in opened
    assert sorted(p.name for p in tmp_path.iterdir() if run_id in p.name) == [
        f"{run_id}.spool", f"{run_id}.tar.gz"]  # no temp or partial file left


@pytest.mark.kernel
def test_workspace_write_preset_against_the_kernel(tmp_path: Path) -> None:
    """The preset as the kernel applies it: workspace and /tmp writable, elsewhere and IP refused."""
    outside = Path(tempfile.mkdtemp(prefix="assay-preset-", dir="/var/tmp"))  # not a write tree of the preset
    try:
        out = outside / "out"  # the guard refuses an --out the command could write: /tmp would be
        work = tmp_path / "work"
        work.mkdir()
        tmp_file = f"/tmp/assay-preset-{secrets.token_hex(4)}.txt"
        run_id = unique_run_id("preset")
        script = (f"echo in > inside.txt; echo tmp > {tmp_file}; echo out > {outside}/refused.txt; "
                  "echo > /dev/tcp/127.0.0.1/9; exit 0")
        proc = assay("run", "--out", out, "--run-id", run_id, "--workdir", work,
                     "--sandbox", "workspace-write", "--", "bash", "-c", script, cwd=work)
        Path(tmp_file).unlink(missing_ok=True)
        assert proc.returncode == 0, proc.stderr
        assert (work / "inside.txt").read_text() == "in\n"
        assert not (outside / "refused.txt").exists()
        archive = Archive(out / f"{run_id}.tar.gz")
        blocked = archive.values("file_blocked")
        assert str(outside / "refused.txt") in blocked  # (bash's own /dev/tty open is refused too)
        assert not any(b.startswith((str(work), "/tmp/")) for b in blocked)
        assert archive.values("connect_blocked") == ["127.0.0.1:9"]
        written = {e["value"] for e in archive.kernel
                   if e["kind"] == "openat" and e["access_mode"] == "write"}
        assert {str(work / "inside.txt"), tmp_file} <= written
        assert archive.json("observation-health.json")["kernel_layer"] == "complete"
    finally:
        shutil.rmtree(outside, ignore_errors=True)


@pytest.mark.kernel
def test_ctrl_c_ends_the_run_with_130_and_an_archive(tmp_path: Path) -> None:
    """A terminal's Ctrl-C: SIGINT to the whole foreground process group, runner included."""
    run_id = unique_run_id("ctrlc")
    ready = tmp_path / "ready"
    runner = subprocess.Popen(
        [*CLI, "run", "--out", str(tmp_path), "--run-id", run_id, "--workdir", str(tmp_path),
         "--", "/usr/bin/python3", "-c",  # the marker is written after the exec: no race with it
         f"import time; open({str(ready)!r}, 'w').close(); time.sleep(60)"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=runner_env(), start_new_session=True)  # its own group, as a shell's foreground job
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
            time.sleep(0.05)
        os.killpg(runner.pid, signal.SIGINT)
        _, stderr = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
    assert runner.returncode == 130, stderr
    archive = Archive(tmp_path / f"{run_id}.tar.gz")
    assert archive.values("exec") == ["/usr/bin/python3"]
    assert str(ready) in archive.values("openat")  # what it did before Ctrl-C is in the evidence
    assert run_cgroups(run_id) == []
