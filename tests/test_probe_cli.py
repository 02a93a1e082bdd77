"""`probe --target`, `--list-only`, `--repeat` and `probe-exec`'s refusals, in baseline.

Baseline runs the probes directly (no runner, no root), in a tmp_path
workspace; every error case checks the one-line message, the exit code and
that nothing reached stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from probe_harness import PROBES_DIR, ROOT

BIN = ROOT / ".venv" / "bin"


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, check=False)  # fmt: skip


def test_target_by_probe_with_repeat_streams_one_record_per_run(tmp_path: Path) -> None:
    selection = ("--probe", "fs_workspace_write_create", "--probe", "fs_tmp_write")
    done = _run(BIN / "probe", "--target", *selection, "--repeat", "2", "--workspace", tmp_path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["probe"]["id"] for r in records] == ["fs_tmp_write", "fs_workspace_write_create"] * 2
    assert {r["run"]["mode"] for r in records} == {"baseline"}
    assert {r["result"]["observed_result"] for r in records} == {"success"}
    assert {r["run"]["workspace_root"] for r in records} == {str(tmp_path)}
    # the probes clean up after themselves, and the harness removes the TMPDIR it created
    assert list(tmp_path.iterdir()) == []
    assert "4 records, 0 failed" in done.stderr


@pytest.mark.kernel  # needs root: workspace-write probes run under assay-runner
def test_target_by_capability_list_only(tmp_path: Path) -> None:
    done = _run(BIN / "probe", "--target", "--cap", "cap_fs_write_outside_workspace", "--modes",
                "baseline,workspace-write", "--list-only", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "baseline\tfs_outside_workspace_write\tcap_fs_write_outside_workspace",
        "workspace-write\tfs_outside_workspace_write\tcap_fs_write_outside_workspace",
    ]
    assert not (tmp_path / "probe-runs").exists()


def test_bad_usage_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cases = [
        (("--target",), "--target needs --probe ID or --cap ID"),
        (("--target", "--cap", "cap_nope"), "unknown capability id 'cap_nope'"),
        (("--target", "--cap", "cap_agent_tool_decision"), "no probe has primary capability"),
        (("--target", "--probe", "../../etc/passwd"), "not a probe"),
        (("--target", "--probe", "nope"), "no such probe"),
        (("--matrix", "--modes", "sideways"), "unknown run mode 'sideways'"),
        (("--matrix", "--modes", "external"), "needs a wrapper command"),
        (("--matrix", "--modes", "read-only", "--boundary", ROOT / "catalogs" / "cfbo-v1.json"),
         "run mode 'read-only' is not admitted by the boundary schema in use"),
        (("--matrix", "--repeat", "0"), "--repeat must be at least 1"),
        (("--matrix", "--jobs", "0"), "--jobs must be at least 1"),
    ]  # fmt: skip
    for args, message in cases:
        done = _run(BIN / "probe", *args, "--workspace", tmp_path, cwd=tmp_path)
        assert (done.returncode, done.stdout) == (2, ""), (args, done.stderr)
        assert done.stderr.startswith("probe: error: ") and message in done.stderr, (args, done.stderr)
        assert done.stderr.count("\n") == 1


def test_probe_exec_runs_only_executable_scripts_under_probes(tmp_path: Path) -> None:
    stray = tmp_path / "evil.sh"
    stray.write_text("#!/usr/bin/env bash\necho pwned > /tmp/should-not-run\n")
    stray.chmod(0o755)
    done = _run(BIN / "probe-exec", "--workspace", tmp_path, "baseline", stray, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert "not a probe: probes are" in done.stderr
    ok = _run(BIN / "probe-exec", "--workspace", tmp_path, "baseline", PROBES_DIR / "fs_system_root_read.sh",
              cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    record = json.loads(ok.stdout)
    assert (record["probe"]["id"], record["operation"]["target"]) == (
        "fs_system_root_read",
        "/etc/os-release",
    )


def test_probe_exec_exports_the_fence_environment(tmp_path: Path) -> None:
    """The env a probe sees, read back through emit-record's own fields."""
    done = _run(BIN / "probe-exec", "--workspace", tmp_path, "baseline", "ipc_unix_socket", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["run"]["workspace_root"] == str(tmp_path)  # FENCE_WORKSPACE_ROOT
    assert record["operation"]["target"].startswith(f"{tmp_path}/.fence-tmp/")  # TMPDIR is workspace-local
    assert record["stack"]["sandbox_mode"] is None  # FENCE_SANDBOX_MODE empty in baseline
    assert record["result"]["observed_result"] == "success"


def test_error_outcomes_are_records_not_failures(tmp_path: Path) -> None:
    """An operation failing for reasons unrelated to policy is an `error` record from its errno."""
    env = {"FENCE_OUTSIDE_DIR": str(tmp_path / "no" / "such" / "dir")}
    done = _run(BIN / "probe", "--target", "--probe", "fs_outside_workspace_write", "--workspace", tmp_path,
                cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert (record["result"]["observed_result"], record["result"]["errno"]) == ("error", "ENOENT")


def test_a_failing_probe_does_not_stop_the_stream(tmp_path: Path) -> None:
    """Without HOME and with no `getent` on PATH the secrets probe cannot find the home
    directory and dies: reported, the others still stream, exit 1."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "cut"):  # getent is the one missing
        (bare / tool).symlink_to(shutil.which(tool))
    env = {k: v for k, v in os.environ.items() if k != "HOME"} | {"PATH": str(bare)}
    cmd = [BIN / "probe", "--target", "--probe", "fs_user_ssh_list", "--probe", "fs_tmp_write"]
    done = subprocess.run([*cmd, "--workspace", tmp_path], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1
    assert [json.loads(line)["probe"]["id"] for line in done.stdout.splitlines()] == ["fs_tmp_write"]
    assert "probe: FAIL baseline fs_user_ssh_list: exited 127: " in done.stderr
    assert "getent: command not found" in done.stderr
    assert "1 records, 1 failed" in done.stderr


def test_probe_op_reports_status_errno_target_and_detail(tmp_path: Path) -> None:
    def op(*args: str | Path) -> tuple[int, list[str]]:
        done = _run(BIN / "probe-op", *args, cwd=tmp_path)
        return done.returncode, done.stdout.rstrip("\n").split("\x1f")

    code, fields = op("write", tmp_path / "f", "--cleanup")
    assert code == 0
    assert fields[:4] == ["success", "", "ok", str(tmp_path / "f")]
    assert json.loads(fields[4]) == {"bytes": 6, "removed": True}
    assert not (tmp_path / "f").exists()
    code, fields = op("write", tmp_path / "no" / "f")
    assert (code, fields[:3]) == (0, ["error", "ENOENT", "open: No such file or directory"])
    assert json.loads(fields[4]) == {"step": "open"}
    code, fields = op("unix-socket", tmp_path / "s.sock")
    assert (code, fields[0], fields[3]) == (0, "success", str(tmp_path / "s.sock"))
    code, fields = op("tcp-loopback")
    assert code == 0 and fields[0] == "success" and fields[3].startswith("127.0.0.1:")
    bad = _run(BIN / "probe-op", "teleport", cwd=tmp_path)
    assert (bad.returncode, bad.stdout) == (1, "")
    assert bad.stderr.startswith("probe-op: error: ")


def test_a_unix_socket_too_long_for_sun_path_is_bound_by_its_name_in_its_directory(tmp_path: Path) -> None:
    """A deep workspace (an xdist worker's tmp_path, a long TMPDIR) must not turn the probe into an error,
    and never into a false success: the socket is made where asked, under a name that fits."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "u1-23.sock"
    done = _run(BIN / "probe-op", "unix-socket", path, cwd=tmp_path)
    fields = done.stdout.rstrip("\n").split("\x1f")
    assert (done.returncode, fields[:4]) == (0, ["success", "", "ok", "u1-23.sock"])
    assert json.loads(fields[4]) == {"dir": str(deep)}
    assert list(deep.iterdir()) == []  # removed after
    for size in (107, 108):  # sun_path is 108 bytes with its NUL: 107 is bound as given, 108 is not
        exact = tmp_path / ("x" * (size - len(str(tmp_path)) - 1))
        assert len(str(exact)) == size
        done = _run(BIN / "probe-op", "unix-socket", exact, cwd=tmp_path)
        fields = done.stdout.rstrip("\n").split("\x1f")
        assert fields[:4] == ["success", "", "ok", str(exact) if size == 107 else exact.name], done.stdout
    too_long = deep / ("s" * 120)  # even the relative name does not fit: an error, not a success
    done = _run(BIN / "probe-op", "unix-socket", too_long, cwd=tmp_path)
    fields = done.stdout.rstrip("\n").split("\x1f")
    assert (done.returncode, fields[:3]) == (0, ["error", "", "bind: AF_UNIX path too long"])
    assert json.loads(fields[4]) == {"dir": str(deep), "step": "bind"}


def test_the_published_key_still_works_for_baseline(tmp_path: Path) -> None:
    """cfbo-v1 (upstream's, run.mode: baseline only): baseline records under it validate against it, and a
    descriptor named explicitly is the only one used."""
    cfbo = ROOT / "catalogs" / "cfbo-v1.json"
    done = _run(BIN / "probe", "--target", "--probe", "fs_tmp_write", "--boundary", cfbo,
                "--workspace", tmp_path, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema_key"] == "cfbo-v1"
    listened = subprocess.run([BIN / "probe", "--listen", "--boundary", cfbo], input=done.stdout,
                              capture_output=True, text=True, check=False)  # fmt: skip
    assert listened.returncode == 0, listened.stdout
    linux = ROOT / "catalogs" / "cfbo-linux-v1.json"
    other = subprocess.run([BIN / "probe", "--listen", "--boundary", linux], input=done.stdout,
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert other.returncode == 1
    assert "schema_key: 'cfbo-v1', expected 'cfbo-linux-v1'" in other.stdout
