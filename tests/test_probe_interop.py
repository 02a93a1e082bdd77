"""fencerunner interop, with no Rust toolchain: our probes pass upstream's own gate stub,
upstream's probes run unchanged under our harness, and baseline records pass upstream's
descriptor rules under its key `cfbo-v1`.

Upstream's files are vendored in tests/upstream_fencerunner/ (Apache-2.0): its 7 probes,
its macOS catalog (their capability ids), and the emit-record stub of its contract gate
with the one-line fix the stub needs. A test lays them out as a fencerunner checkout
(`probes/`, `tmp/`, and `bin/` being our `bin/`) and runs them from there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from probe_harness import PROBES_DIR, ROOT
from probe_harness.helpers import HelperError, json_extract, paging_stress
from probe_harness.modes import BASELINE, Settings, probe_env
from tests import fencerunner_rules
from tests.fencerunner_rules import UpstreamRefusal

BIN = ROOT / ".venv" / "bin"
UPSTREAM = Path(__file__).resolve().parent / "upstream_fencerunner"
STUB = UPSTREAM / "emit_record_stub.sh"
MACOS_CATALOG = UPSTREAM / "catalogs" / "macos_codex_v1.json"
CFBO_V1 = ROOT / "catalogs" / "cfbo-v1.json"
OURS = sorted(PROBES_DIR.glob("*.sh"))
THEIRS = sorted((UPSTREAM / "probes").glob("*.sh"))
STUB_OUTPUT = '{"probe_contract_gate":"validated"}\n'


def _quiet_env(tmp: Path) -> dict[str, str]:
    """Keep upstream's fs_outside_workspace (it appends to /tmp/probe-outside-root-test) and our
    ssh probe inside the test's own directory."""
    (tmp / "home" / ".ssh").mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HOME": str(tmp / "home"), "FENCE_FS_OUTSIDE_TARGET": str(tmp / "outside")}


def fencerunner_checkout(tmp: Path) -> Path:
    """Upstream's probes where a fencerunner user keeps them, with our bin/ as theirs."""
    checkout = tmp / "fencerunner"
    shutil.copytree(UPSTREAM / "probes", checkout / "probes")
    (checkout / "tmp").mkdir()
    (checkout / "bin").symlink_to(ROOT / "bin")
    return checkout


def upstream_gate(probe: Path, tmp: Path, catalog: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """upstream's run_dynamic_gate: a copy of the probe in a shadow tree whose bin/emit-record is
    upstream's stub (the other helpers linked), that bin first on PATH, baseline mode."""
    shadow = tmp / "shadow"
    for sub in ("bin", "probes", "tmp", ".pcg_state"):
        (shadow / sub).mkdir(parents=True)
    for helper in (ROOT / "bin").iterdir():
        if helper.name != "emit-record":
            (shadow / "bin" / helper.name).symlink_to(helper.resolve())
    shutil.copy(STUB, shadow / "bin" / "emit-record")
    copy = shadow / "probes" / probe.name
    shutil.copy(probe, copy)
    copy.chmod(0o755)
    settings = Settings(shadow, catalog, CFBO_V1, tmp, base_env=_quiet_env(tmp))
    settings.tmpdir.mkdir()
    env = probe_env(BASELINE, settings)
    env.update(
        PATH=f"{shadow / 'bin'}{os.pathsep}{env['PATH']}",
        PROBE_CONTRACT_GATE_STATE_DIR=str(shadow / ".pcg_state"),
        JSON_EXTRACT_BIN=str(ROOT / "bin" / "json-extract"),
    )
    done = subprocess.run([str(copy)], env=env, cwd=shadow, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    return done, shadow / ".pcg_state"


def _gate_verdict(done: subprocess.CompletedProcess[str], state: Path) -> list[str]:
    problems = []
    if done.returncode != 0:
        problems.append(f"exited {done.returncode}: {done.stderr.strip()[-300:]}")
    calls = state / "emit_record_invocations"
    if not calls.exists() or calls.read_text() != "1":
        problems.append(f"emit-record stub called {calls.read_text() if calls.exists() else 0} times")
    errors = state / "emit_record_errors.log"
    if errors.exists():
        problems.append(errors.read_text().strip())
    if done.stdout != STUB_OUTPUT:
        problems.append(f"stdout besides the record: {done.stdout!r}")
    return problems


@pytest.mark.parametrize("probe", OURS + THEIRS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_probe_passes_upstreams_dynamic_gate(probe: Path, tmp_path: Path) -> None:
    catalog = MACOS_CATALOG if probe in THEIRS else ROOT / "catalogs" / "linux_assay_v1.json"
    done, state = upstream_gate(probe, tmp_path, catalog)
    assert _gate_verdict(done, state) == []
    assert (state / "emit_record_status").read_text() == "ok\n"


@pytest.mark.parametrize(("probe", "change", "refusal"), [
    ("fs_workspace_list", ("  --operation-args '{}' \\\n", ""), "operation args flags are required"),
    ("net_outbound_tcp", ('--raw-exit-code "${op_rc}"', '--raw-exit-code ""'),
     "--raw-exit-code cannot be empty"),
])  # fmt: skip
def test_the_stub_refuses_what_upstream_refuses(probe: str, change: tuple[str, str], refusal: str,
                                                tmp_path: Path) -> None:  # fmt: skip
    """The defects our probes had: the stub is a real check, not a pass-through."""
    text = (PROBES_DIR / f"{probe}.sh").read_text()
    assert change[0] in text
    bad = tmp_path / "src" / f"{probe}.sh"
    bad.parent.mkdir()
    bad.write_text(text.replace(change[0], change[1]))
    done, state = upstream_gate(bad, tmp_path, ROOT / "catalogs" / "linux_assay_v1.json")
    assert refusal in "\n".join(_gate_verdict(done, state))


def test_upstream_probes_run_unchanged_through_our_harness(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    picks = [a for p in THEIRS for a in ("--probe", p.stem)]
    probes = fencerunner_checkout(tmp_path) / "probes"
    done = subprocess.run(
        [BIN / "probe", "--target", *picks, "--probes-dir", probes, "--catalog", MACOS_CATALOG,
         "--workspace", tmp_path / "ws", "--out", tmp_path / "out"],
        env=_quiet_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(r["probe"]["id"] for r in records) == [p.stem for p in THEIRS]
    upstream = fencerunner_rules.load(CFBO_V1)
    for record in records:
        upstream.validate(record)
        assert record["capabilities_schema_version"] == "macOS_codex_v1"
    by_id = {r["probe"]["id"]: r for r in records}
    # their helpers are ours: paging-stress ran and json-extract read its status
    assert by_id["proc_paging_stress"]["result"]["observed_result"] == "success"
    assert by_id["proc_paging_stress"]["payload"]["raw"]["helper_exit_code"] == 0


def test_baseline_matrix_records_pass_upstreams_descriptor_rules(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    done = subprocess.run(
        [BIN / "probe", "--matrix", "--modes", BASELINE, "--workspace", tmp_path / "ws",
         "--out", tmp_path / "out"],
        env=_quiet_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(records) == len(OURS)
    upstream = fencerunner_rules.load(CFBO_V1)
    for record in records:
        upstream.validate(record)


def test_the_linux_extension_is_ours_and_upstream_says_so() -> None:
    """cfbo-linux-v1 is a documented extension: fencerunner's loader refuses it by design."""
    with pytest.raises(UpstreamRefusal, match="does not match canonical schema"):
        fencerunner_rules.load(ROOT / "catalogs" / "cfbo-linux-v1.json")


def test_the_gate_takes_a_relative_path_from_the_checkout_root() -> None:
    done = subprocess.run([BIN / "probe-contract-gate", "probes/fs_tmp_write.sh"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "PASS probes/fs_tmp_write.sh" in done.stderr


def test_our_gate_passes_upstreams_probes(tmp_path: Path) -> None:
    """They call ${repo_root}/bin/emit-record: the gate's shadow tree puts its stub there."""
    probes = fencerunner_checkout(tmp_path) / "probes"
    done = subprocess.run(
        [BIN / "probe-contract-gate", "--probes-dir", probes, "--catalog", MACOS_CATALOG],
        env=_quiet_env(tmp_path), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("PASS") == len(THEIRS)


@pytest.mark.parametrize(("argv", "document", "printed"), [
    (["--pointer", "/a/b", "--type", "number"], {"a": {"b": 2}}, "2"),
    (["--pointer", "/a/1"], {"a": [1, "x"]}, '"x"'),
    (["--pointer", "/m~1n"], {"m/n": True}, "true"),
    (["--pointer", "/gone", "--default", '""'], {}, '""'),
    (["--pointer", "/t", "--type", "bool", "--default", "false"], {"t": "yes"}, "false"),
    (["--type", "object"], {"k": None}, '{"k":null}'),
])  # fmt: skip
def test_json_extract_reads_like_upstreams(argv: list[str], document: object, printed: str) -> None:
    assert json_extract(["--stdin", *argv], json.dumps(document).encode()) == printed


@pytest.mark.parametrize(("argv", "document", "message"), [
    (["--pointer", "/gone"], {}, "not found"),
    (["--pointer", "/a", "--type", "string"], {"a": 1}, "not of expected type string"),
    (["--pointer", "a"], {}, "must be empty (root) or start with '/'"),
    (["--type", "colour"], {}, "unknown type"),
    (["--bogus"], {}, "unknown flag"),
])  # fmt: skip
def test_json_extract_refuses_like_upstreams(argv: list[str], document: object, message: str) -> None:
    with pytest.raises(HelperError, match=re.escape(message)):
        json_extract(argv, json.dumps(document).encode())


def test_helpers_through_bin_exit_as_upstreams_do(tmp_path: Path) -> None:
    doc = tmp_path / "d.json"
    doc.write_text('{"timeout": false}')
    extract = ROOT / "bin" / "json-extract"
    got = subprocess.run([extract, "--file", doc, "--pointer", "/timeout", "--type", "bool"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert (got.returncode, got.stdout) == (0, "false\n")
    bad = subprocess.run([extract, "--file", tmp_path / "none.json"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert bad.returncode == 1 and bad.stdout == "" and "input file not found" in bad.stderr
    assert paging_stress(["--megabytes", "1", "--passes", "2", "--pattern", "random"]) == 0
    assert paging_stress(["--megabytes", "1", "--passes", "100000000", "--max-seconds", "1"]) == 3
    with pytest.raises(HelperError, match="expected sequential or random"):
        paging_stress(["--pattern", "zigzag"])
