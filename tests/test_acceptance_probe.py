"""The probe-matrix acceptance gate: its rule (pure), and the gate on the real kernel.

Probe records are not byte-identical across runs by design, so the gate
judges three `probe --matrix` runs by their outcome tables, the validity of
every record and archive, and each run's corroboration by its own kernel
evidence (runner/acceptance/probe_gate.py, docs/acceptance.md). The kernel
tests run the gate once through the CLI and then break copies of its pack
in each way the rule must catch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from probe_harness.execute import all_probes
from runner.acceptance.execute import run_gate
from runner.acceptance.expect import ExpectationError, Expectations, ProbeMatrixExpectation, load
from runner.acceptance.gates import BY_NAME
from runner.acceptance.probe_gate import RECORDS, compare_runs, judge
from tests.support import assay

GATE = BY_NAME["probe-matrix"]


def _probe_matrix() -> ProbeMatrixExpectation:
    matrix = load(GATE.expectations).probe_matrix
    assert matrix is not None
    return matrix


EXP = _probe_matrix()


def _tables(*cells: str) -> dict[str, dict[str, dict[str, str]]]:
    """Runs of a two-probe, two-mode matrix where `a` gets `cells[i]` in run i+1 under read-only."""
    return {f"run-{i}": {"a": {"baseline": "success", "read-only": cell},
                         "b": {"baseline": "success", "read-only": "success"}}
            for i, cell in enumerate(cells, start=1)}


SMALL = ProbeMatrixExpectation(modes=["baseline", "read-only"],
                               outcomes={"a": ["success", "denied:EACCES"], "b": ["success", "success"]})


def test_identical_tables_equal_to_the_expected_one_pass() -> None:
    assert compare_runs(_tables("denied:EACCES", "denied:EACCES", "denied:EACCES"), SMALL) == []


def test_a_cell_that_differs_between_runs_is_named() -> None:
    assert compare_runs(_tables("denied:EACCES", "success", "denied:EACCES"), SMALL) == [
        "a in read-only: run-1 denied:EACCES, run-2 success"]


def test_a_table_that_differs_from_the_expected_one_is_named_per_cell() -> None:
    problems = compare_runs(_tables("denied:EPERM", "denied:EPERM", "denied:EPERM"), SMALL)
    assert problems == ["a in read-only: denied:EPERM, expected denied:EACCES"]
    runs = _tables("denied:EACCES", "denied:EACCES", "denied:EACCES")
    del runs["run-1"]["b"]["read-only"]
    del runs["run-2"]["b"]["read-only"]
    del runs["run-3"]["b"]["read-only"]
    for run in runs.values():
        run["c"] = {"baseline": "success", "read-only": "success"}
    assert compare_runs(runs, SMALL) == [
        "b in read-only: no record, expected success",
        "c: in the runs but not in the expected table",
    ]


def test_the_gates_table_covers_every_probe_and_mode() -> None:
    assert sorted(EXP.outcomes) == sorted(p.stem for p in all_probes())
    assert EXP.modes[0] == "baseline" and len(EXP.modes) == 4
    assert all(entry.split("/", 1)[0] in EXP.modes[1:] for entry in EXP.not_checked)


def test_a_row_with_the_wrong_number_of_cells_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "probe-matrix.toml"
    bad.write_text('[probe_matrix]\nmodes = ["baseline", "read-only"]\n'
                   '[probe_matrix.outcomes]\nfs_tmp_write = ["success"]\n')
    with pytest.raises(ExpectationError, match=r"field probe_matrix.outcomes.fs_tmp_write: 1 cells, "
                                               r"expected one per mode \(2\)$"):
        load(bad)


def test_the_gate_without_a_probe_matrix_table_fails_before_running(tmp_path: Path) -> None:
    result = run_gate(GATE, tmp_path / "out", Expectations(), GATE.expectations, None)
    assert result.status == "failed"
    assert result.problems == ["expectations: no [probe_matrix] table for this gate"]
    assert not (tmp_path / "out" / "gates" / GATE.name / "run-1").exists()


# --- the gate on the real kernel ----------------------------------------------


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("probe-gate") / "pack"
    done = assay("acceptance", "--gates", GATE.name, "--out", out, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return out


def _copy(pack: Path, tmp_path: Path) -> Path:
    gate_dir = tmp_path / "gate"
    shutil.copytree(pack / "gates" / GATE.name, gate_dir)
    return gate_dir


def _edit_record(gate_dir: Path, run: str, probe: str, mode: str, result: dict) -> None:
    path = gate_dir / run / RECORDS
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["probe"]["id"] == probe and record["run"]["mode"] == mode:
            record["result"].update(result)
            lines[i] = json.dumps(record)
            break
    else:
        raise AssertionError(f"no record {probe} in {mode}")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.kernel
def test_the_gate_passes_with_three_identical_corroborated_tables(pack: Path) -> None:
    gate_dir = pack / "gates" / GATE.name
    result = json.loads((gate_dir / "result.json").read_text())
    assert (result["status"], result["problems"], result["determinism_exit"]) == ("passed", [], 0)
    outcomes = json.loads((gate_dir / "outcomes.json").read_text())
    expected = {probe: dict(zip(EXP.modes, row, strict=True)) for probe, row in EXP.outcomes.items()}
    assert outcomes["runs"] == {f"run-{n}": expected for n in (1, 2, 3)}
    runner_modes = [m for m in EXP.modes if m != "baseline"]
    for n in (1, 2, 3):
        report = json.loads((gate_dir / f"run-{n}" / "corroboration.json").read_text())
        assert report["counts"]["disagree"] == 0
        assert len(list((gate_dir / f"run-{n}").glob("probe-*.tar.gz"))) == len(runner_modes)
        assert len(list((gate_dir / f"run-{n}").glob("probe-*.spool"))) == len(runner_modes)
    manifest = json.loads((pack / "manifest.json").read_text())
    (entry,) = manifest["gates"]
    assert len(entry["archives"]) == 3 * len(runner_modes)
    done = assay("acceptance", "verify", pack, "--require-gates", GATE.name)
    assert done.returncode == 0, done.stdout


@pytest.mark.kernel
def test_a_record_the_kernel_contradicts_fails_corroboration_and_the_table(
        pack: Path, tmp_path: Path) -> None:
    gate_dir = _copy(pack, tmp_path)
    _edit_record(gate_dir, "run-2", "fs_tmp_write", "read-only",
                 {"observed_result": "success", "errno": None, "message": "ok"})
    _, problems = judge(gate_dir, 3, EXP)
    disagrees = "run-2: fs_tmp_write in read-only: the kernel disagrees"
    assert [p for p in problems if not p.startswith(disagrees)] == [
        "fs_tmp_write in read-only: run-1 denied:EACCES, run-2 success"]
    assert len(problems) == 2


@pytest.mark.kernel
def test_a_missing_record_an_invalid_record_and_a_missing_archive_are_named(
        pack: Path, tmp_path: Path) -> None:
    gate_dir = _copy(pack, tmp_path)
    records = gate_dir / "run-1" / RECORDS
    lines = records.read_text().splitlines()
    kept = [line for line in lines
            if not ('"id": "fs_workspace_list"' in line and '"mode": "baseline"' in line)]
    assert len(kept) == len(lines) - 1
    records.write_text("\n".join(kept) + "\n")
    _edit_record(gate_dir, "run-2", "proc_fork_children", "baseline", {"observed_result": "maybe"})
    (archive,) = (gate_dir / "run-3").glob("probe-workspace-write-*.tar.gz")
    archive.unlink()
    _, problems = judge(gate_dir, 3, EXP)
    assert "run-1: fs_workspace_list in baseline: no record" in problems
    assert any(p.startswith(f"run-2: {RECORDS}:") and "invalid record" in p for p in problems)
    assert "run-2: proc_fork_children in baseline: no record" in problems
    assert "run-3: no runner archive for mode workspace-write" in problems
    assert "fs_workspace_list in baseline: run-1 no record, run-2 success" in problems
    assert "fs_workspace_list in baseline: run-1 no record, run-3 success" in problems
    assert "proc_fork_children in baseline: run-1 success, run-2 no record" in problems
    assert "fs_workspace_list in baseline: no record, expected success" in problems
    assert len(problems) == 8, problems


@pytest.mark.kernel
def test_not_checked_entries_must_be_exactly_the_expected_ones(pack: Path) -> None:
    gate_dir = pack / "gates" / GATE.name
    dropped, *rest = EXP.not_checked
    fewer = msgspec.structs.replace(EXP, not_checked=rest)
    _, problems = judge(gate_dir, 3, fewer)
    assert problems == [f"run-{n}: {dropped}: not corroborated by kernel evidence" for n in (1, 2, 3)]
    more = msgspec.structs.replace(EXP, not_checked=[*EXP.not_checked, "read-only/fs_tmp_write"])
    _, problems = judge(gate_dir, 3, more)
    assert problems == [f"run-{n}: read-only/fs_tmp_write: expected not_checked, but the kernel evidence "
                        "was judged" for n in (1, 2, 3)]


@pytest.mark.kernel
def test_verify_reapplies_the_rule_to_an_edited_pack(pack: Path, tmp_path: Path) -> None:
    copy = tmp_path / "pack"
    shutil.copytree(pack / "gates", copy / "gates")
    for name in ("manifest.json", "subject-checksums.txt"):
        shutil.copyfile(pack / name, copy / name)
    _edit_record(copy / "gates" / GATE.name, "run-3", "net_loopback_tcp", "danger-full-access",
                 {"observed_result": "denied", "errno": "EPERM", "message": "refused"})
    done = assay("acceptance", "verify", copy, "--require-gates", GATE.name)
    assert done.returncode == 1
    subject = f"gates/{GATE.name}/run-3/{RECORDS}"
    assert f"subject {subject}: sha256 mismatch" in done.stdout
    assert (f"gate {GATE.name}: marked passed, but net_loopback_tcp in danger-full-access: "
            "run-1 success, run-3 denied:EPERM") in done.stdout
