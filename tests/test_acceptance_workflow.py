"""The delegated-acceptance workflow, and the gates it runs, exercised here.

Static checks: actionlint passes; every `run:` step is a make target; one
step per registered gate with the dispatch selector; pull requests trigger on
exactly the gated paths. Kernel checks: the workflow's own `run:` steps are
executed in order (everything but `make setup`, which `make test` runs
before this suite), so the workflow cannot drift from what is tested; the
pack they leave verifies, and one flipped byte makes it fail by name. The
hidden-write gate fails when its runs are checked against a clean
expectation.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner.acceptance.expect import load
from runner.acceptance.gates import BY_NAME, GATED_PATHS, GATES
from runner.capture.cgroup import RunCgroup
from runner.capture.owner import Owner, records_dir, remove_record, start_time, write_record
from tests.support import ROOT, assay

WORKFLOW = ROOT / ".github" / "workflows" / "delegated-acceptance.yml"
ACTIONLINT = Path(sys.executable).with_name("actionlint")
MAKE_STEP = re.compile(r"^make (?P<target>[a-z][a-z-]*)(?P<vars>(?: [A-Z_]+=[A-Za-z0-9_.,/-]+)*)$")


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _job() -> dict:
    (job,) = _workflow()["jobs"].values()
    return job


def _run_steps() -> list[dict]:
    return [s for s in _job()["steps"] if "run" in s]


def test_actionlint_passes() -> None:
    assert ACTIONLINT.exists(), "actionlint comes with the dev extras: make setup"
    done = subprocess.run([ACTIONLINT, "-no-color", str(WORKFLOW)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The lint is not a formality: an unknown input of the attest action is an error."""
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("subject-checksums:", "subject-checksumz:"))
    done = subprocess.run([ACTIONLINT, "-no-color", str(broken)], capture_output=True, text=True)
    assert done.returncode == 1 and "subject-checksumz" in done.stdout


def test_every_run_step_is_a_make_target_the_suite_exercises() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    steps = [s["run"].strip() for s in _run_steps()]
    for step in steps:
        m = MAKE_STEP.match(step)
        assert m, f"run step {step!r} is not a plain `make TARGET [VAR=value ...]`"
        assert m["target"] in targets, f"{step!r}: no such make target"
    # `make setup` is the one step not replayed below: `make test` runs it before the suite.
    assert steps[0] == "make setup" and "setup" not in " ".join(steps[1:])
    assert re.search(r"^test: .*\bsetup\b", makefile, re.M)


def test_one_step_per_gate_with_the_dispatch_selector() -> None:
    names = [g.name for g in GATES]
    on = _workflow().get("on") or _workflow()[True]  # YAML 1.1 reads the key `on` as True
    assert on["workflow_dispatch"]["inputs"]["gates"]["options"] == ["all", *names]
    gate_steps = [s for s in _job()["steps"] if s.get("name", "").startswith("Gate: ")]
    assert [s["name"] for s in gate_steps] == [f"Gate: {n}" for n in names]
    for step, name in zip(gate_steps, names, strict=True):
        assert step["run"] == f"make acceptance-gate GATE={name}"
        assert step["if"] == f"!cancelled() && (env.GATES == 'all' || env.GATES == '{name}')"
    assert _job()["env"]["GATES"] == "${{ inputs.gates || 'all' }}"


def test_pull_requests_trigger_on_exactly_the_gated_paths() -> None:
    on = _workflow().get("on") or _workflow()[True]
    want = sorted(p if (ROOT / p).is_file() or "." in Path(p).name else f"{p}/**" for p in GATED_PATHS)
    assert sorted(on["pull_request"]["paths"]) == want


def test_the_pack_is_verified_uploaded_and_attested_from_one_place() -> None:
    job = _job()
    out = job["env"]["ACCEPTANCE_OUT"]
    assert re.search(rf"^ACCEPTANCE_OUT \?= {re.escape(out)}$", (ROOT / "Makefile").read_text(), re.M)
    steps = {s.get("uses", "").split("@")[0]: s for s in job["steps"]}
    attest = steps["actions/attest-build-provenance"]["with"]
    assert attest["subject-checksums"] == f"{out}/subject-checksums.txt"
    assert f"{out}/manifest.json" in steps["actions/upload-artifact"]["with"]["path"]
    assert job["permissions"]["attestations"] == "write" and job["permissions"]["id-token"] == "write"
    assert "self-hosted" in job["runs-on"]
    assert _workflow()["concurrency"]["cancel-in-progress"] is False


# --- the workflow's steps, run for real ---------------------------------------


def _replay(out: Path, gates: str = "all") -> list[tuple[str, int, str]]:
    """Run the workflow's `run:` steps after `make setup`, as the job would (its env, its `if`s)."""
    env = {**os.environ, **_job()["env"], "GATES": gates, "ACCEPTANCE_OUT": str(out), "CI": "true"}
    results = []
    for step in _run_steps()[1:]:
        condition = step.get("if", "always()")
        selected = re.findall(r"env\.GATES == '([a-z-]+)'", condition)
        if selected and gates not in selected:
            continue
        done = subprocess.run(["bash", "-c", step["run"]], cwd=ROOT, env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=900)
        results.append((step["run"], done.returncode, done.stdout + done.stderr))
    return results


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, int, str]]]:
    out = tmp_path_factory.mktemp("delegated") / "pack"
    return out, _replay(out)


@pytest.mark.kernel
def test_the_workflow_steps_pass_every_gate(replayed: tuple[Path, list]) -> None:
    out, results = replayed
    ran = [cmd for cmd, _, _ in results]
    assert ran[0] == "make acceptance-prepare" and ran[-1] == "make acceptance-verify"
    assert ran[1:-1] == [f"make acceptance-gate GATE={g.name}" for g in GATES]
    for cmd, code, output in results:
        assert code == 0, f"{cmd} exited {code}:\n{output[-3000:]}"
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(g["gate"], g["status"]) for g in manifest["gates"]] == [(g.name, "passed") for g in GATES]
    for g in manifest["gates"]:
        matrix = load(BY_NAME[g["gate"]].expectations).probe_matrix
        per_run = 1 if matrix is None else len([m for m in matrix.modes if m != "baseline"])
        assert len(g["archives"]) == 3 * per_run and "PASS: gate" in (out / g["log"]).read_text()


@pytest.mark.kernel
def test_the_pack_records_the_runner_tree_and_host(replayed: tuple[Path, list]) -> None:
    out, _ = replayed
    manifest = json.loads((out / "manifest.json").read_text())
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert manifest["runner"]["git_commit"] == git.stdout.strip()
    for entry in manifest["runner"]["gated_paths"]:
        tree = subprocess.run(["git", "-C", str(ROOT), "rev-parse", f"HEAD:{entry['path']}"],
                              capture_output=True, text=True)
        assert entry["tree"] == (tree.stdout.strip() if tree.returncode == 0 else None), entry
    assert [e["path"] for e in manifest["runner"]["gated_paths"]] == list(GATED_PATHS)
    assert manifest["host"]["kernel"] == os.uname().release
    assert manifest["host"]["bcc"] == importlib.metadata.version("bcc")
    done = subprocess.run(["sha256sum", "-c", "--quiet", "subject-checksums.txt"], cwd=out,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.kernel
def test_a_flipped_archive_byte_in_the_real_pack_fails_verify_by_name(
        replayed: tuple[Path, list], tmp_path: Path) -> None:
    out, _ = replayed
    pack = tmp_path / "pack"
    shutil.copytree(out / "gates", pack / "gates")
    for name in ("manifest.json", "subject-checksums.txt"):
        shutil.copyfile(out / name, pack / name)
    assert assay("acceptance", "verify", pack, "--require-gates", "all").returncode == 0
    subject = f"gates/{GATES[0].name}/run-3/{GATES[0].run_id}.tar.gz"
    original = (pack / subject).read_bytes()
    data = bytearray(original)
    data[100] ^= 0x80
    (pack / subject).write_bytes(bytes(data))
    try:
        done = assay("acceptance", "verify", pack, "--require-gates", "all")
    finally:  # the session checks every runner-written archive it finds
        (pack / subject).write_bytes(original)
    assert done.returncode == 1
    bad = [line for line in done.stdout.splitlines() if not line.startswith("FAIL:")]
    assert bad and all(line.startswith(f"subject {subject}: ") for line in bad[:-1]), done.stdout
    assert any("sha256 mismatch" in line for line in bad)


@pytest.mark.kernel
def test_hidden_write_gate_fails_when_a_clean_run_is_expected(tmp_path: Path) -> None:
    clean = ROOT / "tests" / "data" / "acceptance" / "hidden-write-clean.toml"
    out = tmp_path / "pack"
    done = assay("acceptance", "--gates", "hidden-write", "--out", out, "--expect", f"hidden-write={clean}",
                 timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads((out / "gates" / "hidden-write" / "result.json").read_text())
    hidden = str(out / ".work" / "hidden-write" / "workspace" / "hidden-write-output.txt")
    assert result["status"] == "failed" and result["determinism_exit"] == 0
    assert sorted(result["problems"]) == sorted([
        f"expectations: binding tc_hw_001 (read_file): undeclared write {hidden!r} inside its window",
        "expectations: binding tc_hw_001: kernel_events is 2, expected 1",
        f"expectations: files_written: unexpected {hidden!r}",
    ])
    assert "FAILED: hidden-write" in done.stdout


@pytest.mark.kernel
def test_an_undeclared_mkdir_is_a_hidden_write(tmp_path: Path) -> None:
    """The write_file call makes notes/ (event_124) before it writes notes/hw.txt: undeclared, it fails."""
    own = (ROOT / "fixtures" / "acceptance" / "hidden-write.toml").read_text()
    declared = 'declared_writes = ["$WORKSPACE/notes", "$WORKSPACE/notes/hw.txt"]'
    assert own.count(declared) == 1
    edited = tmp_path / "mkdir-undeclared.toml"
    edited.write_text(own.replace(declared, 'declared_writes = ["$WORKSPACE/notes/hw.txt"]'))
    out = tmp_path / "pack"
    done = assay("acceptance", "--gates", "hidden-write", "--out", out, "--expect", f"hidden-write={edited}",
                 timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads((out / "gates" / "hidden-write" / "result.json").read_text())
    notes = str(out / ".work" / "hidden-write" / "workspace" / "notes")
    assert result["problems"] == [
        f"expectations: binding tc_hw_002 (write_file): undeclared write {notes!r} inside its window"]


@pytest.mark.kernel
def test_prepare_removes_stale_acceptance_cgroups_and_refuses_busy_ones(tmp_path: Path) -> None:
    """Stale means the owner record names a runner that is gone; a live run's cgroup is never removed."""
    parent = RunCgroup.parent_path()
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = parent / f"acceptance-stale-{gone.pid}-{secrets.token_hex(4)}"
    live = parent / f"acceptance-live-{os.getpid()}-{secrets.token_hex(4)}"
    busy = parent / f"acceptance-busy-{secrets.token_hex(4)}"
    stale.mkdir(parents=True)
    records = records_dir(parent.name)
    write_record(records, stale.stat().st_ino, Owner(pid=gone.pid, start=1, cgroup=str(stale)))
    live.mkdir()
    live_record = write_record(records, live.stat().st_ino,
                               Owner(pid=os.getpid(), start=start_time(os.getpid()), cgroup=str(live)))
    busy.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (busy / "cgroup.procs").write_text(f"{sleeper.pid}\n")
        (tmp_path / "old-pack").mkdir()
        done = assay("acceptance", "prepare", "--out", tmp_path / "old-pack")
        assert done.returncode == 1
        assert f"{busy}: still has processes {sleeper.pid}" in done.stdout
        assert f"removed the cgroup {stale} of a runner that died (pid {gone.pid})" in done.stdout
        assert not stale.exists() and not (tmp_path / "old-pack").exists()
        assert live.is_dir(), "an empty cgroup of a live runner (compiling its monitor) was removed"
    finally:
        sleeper.kill()
        sleeper.wait()
        for cg in (stale, live):
            with contextlib.suppress(FileNotFoundError):
                cg.rmdir()
        remove_record(live_record)
        for _ in range(50):
            try:
                busy.rmdir()
                break
            except OSError:
                subprocess.run(["sleep", "0.1"], check=False)
    assert assay("acceptance", "prepare", "--out", tmp_path / "old-pack").returncode == 0
