"""Proof pack, verify, expectations and gate outcomes, without the kernel.

The gate directories here are built from a recorded spool normalized
offline (tests/data/threads.spool), so these tests need no root; the real
gates run in tests/test_acceptance_workflow.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from runner.acceptance import execute
from runner.acceptance.execute import GateResult, Status, run_gate
from runner.acceptance.expect import ExpectationError, Expectations, check, load
from runner.acceptance.gates import GATES, Gate, PythonModule, select
from runner.acceptance.pack import CHECKSUMS, MANIFEST, PACK_SCHEMA, write_pack
from runner.acceptance.verify import verify
from runner.review.load import load_view
from runner.review.view import BindingEntry, EndpointEntry, EventRef, RunView
from tests.support import ROOT, assay

SPOOL = ROOT / "tests" / "data" / "threads.spool"


def _archive(tmp: Path) -> Path:
    """A real archive (and its spool beside it), normalized from a recorded capture."""
    tmp.mkdir(parents=True, exist_ok=True)
    archive = tmp / "threads.tar.gz"
    if not archive.exists():
        done = assay("normalize", SPOOL, "--out", archive)
        assert done.returncode == 0, done.stderr
        shutil.copyfile(SPOOL, tmp / "threads.spool")
    return archive


def _gate_dir(out: Path, name: str, archive: Path, status: Status = "passed") -> Path:
    """A gate directory as execute.run_gate leaves it: three runs, log, result."""
    gate_dir = out / "gates" / name
    for n in (1, 2, 3):
        (gate_dir / f"run-{n}").mkdir(parents=True)
        shutil.copyfile(archive, gate_dir / f"run-{n}" / f"acceptance-{name}.tar.gz")
    (gate_dir / "gate.log").write_text(f"PASS: gate {name}\n")
    reason = "" if status == "passed" else "because"
    result = GateResult(name, "test gate", status, reason, [], 3, 0, ["true"])
    (gate_dir / "result.json").write_bytes(msgspec.json.encode(result))
    return gate_dir


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    out = tmp_path / "pack"
    archive = _archive(tmp_path / "src")
    _gate_dir(out, "kernel-only", archive)
    _gate_dir(out, "kernel-policy", archive)
    write_pack(out)
    return out


def test_manifest_lists_every_file_with_its_digest_role_and_claim_ceiling(pack: Path) -> None:
    manifest = json.loads((pack / MANIFEST).read_text())
    assert manifest["schema"] == PACK_SCHEMA
    files = sorted(p.relative_to(pack).as_posix() for p in (pack / "gates").rglob("*") if p.is_file())
    assert [s["path"] for s in manifest["subjects"]] == files
    for s in manifest["subjects"]:
        data = (pack / s["path"]).read_bytes()
        assert s["bytes"] == len(data)
        assert s["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
    roles = {s["path"].rsplit("/", 1)[-1]: s["role"] for s in manifest["subjects"]}
    assert roles["acceptance-kernel-only.tar.gz"] == "runner_archive"
    assert roles["gate.log"] == "gate_log"
    assert [g["gate"] for g in manifest["gates"]] == ["kernel-only", "kernel-policy"]
    assert manifest["gates"][0]["log"] == "gates/kernel-only/gate.log"
    assert manifest["claim_ceiling"]["does_not_prove"]
    assert manifest["host"]["kernel"] == subprocess.run(["uname", "-r"], capture_output=True,
                                                        text=True).stdout.strip()


def test_subject_checksums_is_what_sha256sum_checks(pack: Path) -> None:
    lines = (pack / CHECKSUMS).read_text().splitlines()
    assert lines[0].endswith("  manifest.json")
    done = subprocess.run(["sha256sum", "-c", CHECKSUMS], cwd=pack, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": OK") == len(lines)


def test_verify_accepts_an_untouched_pack(pack: Path) -> None:
    done = assay("acceptance", "verify", pack, "--require-gates", "kernel-only,kernel-policy")
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith(f"OK {pack}")


def test_one_flipped_archive_byte_fails_verify_naming_the_subject(pack: Path) -> None:
    target = pack / "gates" / "kernel-policy" / "run-2" / "acceptance-kernel-policy.tar.gz"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    done = assay("acceptance", "verify", pack)
    assert done.returncode == 1
    named = [line for line in done.stdout.splitlines()
             if line.startswith("subject gates/kernel-policy/run-2/acceptance-kernel-policy.tar.gz:")]
    assert any("sha256 mismatch" in line for line in named), done.stdout
    assert "gates/kernel-only/" not in done.stdout


def test_verify_names_missing_extra_and_miswritten_files(pack: Path) -> None:
    (pack / "gates" / "kernel-only" / "gate.log").unlink()
    (pack / "gates" / "kernel-only" / "planted.txt").write_text("x")
    text = (pack / CHECKSUMS).read_text().replace("  gates/kernel-policy/gate.log", "  gates/kernel-policy/x")
    (pack / CHECKSUMS).write_text(text)
    done = assay("acceptance", "verify", pack)
    assert done.returncode == 1
    out = done.stdout
    assert "subject gates/kernel-only/gate.log: missing from the pack" in out
    assert "file gates/kernel-only/planted.txt: in the pack but not a subject" in out
    assert f"{CHECKSUMS}: gates/kernel-policy/gate.log is missing" in out
    assert f"{CHECKSUMS}: gates/kernel-policy/x is not a subject" in out


def test_an_edited_manifest_no_longer_matches_its_checksum(pack: Path) -> None:
    manifest = json.loads((pack / MANIFEST).read_text())
    manifest["gates"][1]["status"] = "passed"
    manifest["host"]["kernel"] = "forged"
    (pack / MANIFEST).write_text(json.dumps(manifest))
    _, problems = verify(pack, [])
    assert any(p.startswith(f"{CHECKSUMS}: {MANIFEST} has") for p in problems), problems


def test_required_gates_must_be_in_the_pack_and_passed(tmp_path: Path) -> None:
    out = tmp_path / "pack"
    archive = _archive(tmp_path / "src")
    _gate_dir(out, "kernel-only", archive)
    _gate_dir(out, "kernel-policy", archive, status="could_not_run")
    write_pack(out)
    _, problems = verify(out, select("all"))
    assert "gate kernel-policy: required, but could not run: because" in problems
    assert "gate hidden-write: required, but not in the pack (skipped)" in problems
    assert not any(p.startswith("gate kernel-only") for p in problems)


def test_a_passed_gate_whose_archives_differ_fails_verify(tmp_path: Path) -> None:
    out = tmp_path / "pack"
    archive = _archive(tmp_path / "src")
    gate_dir = _gate_dir(out, "kernel-only", archive)
    other = tmp_path / "other.tar.gz"
    done = assay("normalize", SPOOL, "--out", other, "--run-id", "other")
    assert done.returncode == 0, done.stderr
    shutil.copyfile(other, gate_dir / "run-3" / "acceptance-kernel-only.tar.gz")
    write_pack(out)
    _, problems = verify(out, [])
    assert problems == ["gate kernel-only: marked passed, but its archives are not byte-identical"]


def test_verify_of_a_directory_without_a_pack_is_unusable_input(tmp_path: Path) -> None:
    done = assay("acceptance", "verify", tmp_path)
    assert done.returncode == 2
    assert "not a proof pack" in done.stderr


def test_a_gate_whose_prerequisite_is_missing_could_not_run(tmp_path: Path) -> None:
    gate = Gate("needs-sdk", "needs a module nobody has", ("/bin/true",),
                requires=(PythonModule("assay_no_such_module", "install it"),))
    exp_file = tmp_path / "e.toml"
    exp_file.write_text("")
    result = run_gate(gate, tmp_path / "out", load(exp_file), exp_file, None)
    assert result.status == "could_not_run"
    assert "cannot import assay_no_such_module" in result.reason and "install it" in result.reason
    gate_dir = tmp_path / "out" / "gates" / "needs-sdk"
    assert not list(gate_dir.glob("run-*")), "nothing may run when a prerequisite is missing"
    assert json.loads((gate_dir / "result.json").read_text())["status"] == "could_not_run"
    assert "COULD NOT RUN" in (gate_dir / "gate.log").read_text()


def test_a_host_problem_stops_every_gate_before_it_runs(tmp_path: Path) -> None:
    exp_file = GATES[0].expectations
    result = run_gate(GATES[0], tmp_path, load(exp_file), exp_file, "the gates need root")
    assert (result.status, result.reason) == ("could_not_run", "the gates need root")


def test_exit_codes_separate_failed_from_could_not_run() -> None:
    def results(*statuses: Status) -> list[GateResult]:
        return [GateResult(f"g{i}", "", s, "", [], 3, None, []) for i, s in enumerate(statuses)]

    assert execute.exit_code(results("passed", "passed")) == 0
    assert execute.exit_code(results("passed", "could_not_run")) == 3
    assert execute.exit_code(results("could_not_run", "failed")) == 1


def test_every_registered_gate_has_a_valid_expectations_file() -> None:
    for gate in GATES:
        assert isinstance(load(gate.expectations), Expectations), gate.name


def test_a_bad_expectations_file_is_one_clear_error_before_anything_runs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[evidence]\nfile_written = ["x"]\n')
    with pytest.raises(ExpectationError, match=r"bad\.toml.*file_written"):
        load(bad)
    done = assay("acceptance", "--gates", "kernel-only", "--out", tmp_path / "out",
                 "--expect", f"kernel-only={bad}")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "file_written" in done.stderr
    assert not (tmp_path / "out").exists()
    done = assay("acceptance", "--gates", "kernel-onyl", "--out", tmp_path / "out")
    assert done.returncode == 2 and "unknown gate kernel-onyl" in done.stderr


def _view(tmp_path: Path) -> RunView:
    return load_view(_archive(tmp_path), None)


def test_expectations_check_compares_exactly_and_by_inclusion(tmp_path: Path) -> None:
    view = _view(tmp_path)
    execs = sorted({x.path for p in view.processes for x in p.execs if x.path})
    written = view.summary.files_written
    exp = msgspec.convert({"evidence": {"execs": execs, "files_written": written, "endpoints": [],
                                        "files_read_include": []},
                           "counts": {"processes": len(view.processes)}}, Expectations)
    assert check(exp, view, {}) == []
    exp = msgspec.convert({"evidence": {"execs": [*execs, "/bin/extra"], "files_written": written[1:],
                                        "files_read_include": ["/never/read"]},
                           "counts": {"processes": len(view.processes) + 1}}, Expectations)
    problems = check(exp, view, {})
    assert "execs: expected '/bin/extra', not in the run" in problems
    assert f"files_written: unexpected {written[0]!r}" in problems
    assert "files_read: expected '/never/read', not read in the run" in problems
    assert f"counts: processes is {len(view.processes)}, expected {len(view.processes) + 1}" in problems
    assert len(problems) == 4


def test_endpoints_leave_out_host_name_services_unless_listed(tmp_path: Path) -> None:
    view = _view(tmp_path)
    nscd = EndpointEntry(endpoint="unix:/var/run/nscd/socket", kinds=["connect"], events=1, blocked=False)
    other = EndpointEntry(endpoint="unix:/run/other.sock", kinds=["connect"], events=1, blocked=False)
    view = msgspec.structs.replace(view, endpoints=[*view.endpoints, nscd, other])
    want = [e.endpoint for e in view.endpoints if e is not nscd]
    exp = msgspec.convert({"evidence": {"endpoints": want}}, Expectations)
    assert check(exp, view, {}) == []
    exp = msgspec.convert({"evidence": {"endpoints": [*want, nscd.endpoint, "unix:/run/nscd/socket"]}},
                          Expectations)
    assert check(exp, view, {}) == ["endpoints: expected 'unix:/run/nscd/socket', not in the run"]
    exp = msgspec.convert({"evidence": {"endpoints": [w for w in want if w != other.endpoint]}},
                          Expectations)
    assert check(exp, view, {}) == ["endpoints: unexpected 'unix:/run/other.sock'"]


def test_acceptance_list_shows_the_registry() -> None:
    done = assay("acceptance", "list")
    assert done.returncode == 0
    assert [line.split(":", 1)[0] for line in done.stdout.splitlines()] == [g.name for g in GATES]


def _ref(seq: int, kind: str, value: str, access_mode: str | None = None) -> EventRef:
    return EventRef(seq=seq, pid=1, kind=kind, value=value, access_mode=access_mode, status=None,
                    offset_ms=float(seq))


WRITES = [  # (kernel line, whether it writes its path)
    (_ref(0, "openat", "/w/read", "read"), False),
    (_ref(1, "openat", "/w/opened", "write"), True),
    (_ref(2, "openat", "/w/both", "read_write"), True),
    (_ref(3, "file_blocked", "/w/blocked-read", "read"), False),
    (_ref(4, "file_blocked", "/w/blocked-write", "write"), True),
    (_ref(5, "event_120", "/w/unlinked"), True),
    (_ref(6, "event_121", "/w/rmdir"), True),
    (_ref(7, "event_122", "/w/renamed-from"), True),
    (_ref(8, "event_123", "/w/renamed-to"), True),
    (_ref(9, "event_124", "/w/made"), True),
    (_ref(10, "event_224", "/w/mkdir-refused"), True),
    (_ref(11, "event_125", "/w/symlink"), True),
    (_ref(12, "event_126", "../symlink-target"), False),
    (_ref(13, "event_127", "/w/link-existing"), False),
    (_ref(14, "event_128", "/w/link-new"), True),
    (_ref(15, "event_129", "/w/truncated"), True),
    (_ref(16, "event_130", "/w/chmod"), True),
    (_ref(17, "event_131", "/w/setuid"), True),
    (_ref(18, "event_132", "/w/fifo"), True),
    (_ref(19, "event_6", "127.0.0.1:53"), False),
    (_ref(20, "event_140", "/w/io-uring"), False),
    (_ref(21, "exec", "/bin/true"), False),
]


def test_directory_changes_are_writes_in_a_tool_calls_window(tmp_path: Path) -> None:
    view = _view(tmp_path)
    call = BindingEntry(tool_call_id="tc_x", tool="read_file", policy_decision="allow",
                        kernel_event_count=len(WRITES), start_ms=0.0, end_ms=30.0,
                        events=[e for e, _ in WRITES])
    view = msgspec.structs.replace(view, bindings=[call])
    writes = sorted((e.value for e, w in WRITES if w), key=str)
    assert len(writes) == 15
    exp = msgspec.convert({"bindings": [{"tool_call_id": "tc_x"}]}, Expectations)
    assert check(exp, view, {}) == [f"binding tc_x (read_file): undeclared write {w!r} inside its window"
                                    for w in writes]
    exp = msgspec.convert({"bindings": [{"tool_call_id": "tc_x", "declared_writes": writes[1:],
                                         "undeclared_writes": writes[:1]}]}, Expectations)
    assert check(exp, view, {}) == []
