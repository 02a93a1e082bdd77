"""The contract gate really fails on bad probes, and passes every shipped probe.

Each bad probe is the shipped `fs_workspace_list` with one defect, in a
tmp_path probes directory (the gate's location rule is relative to the
directory it is given), so a pass of the untouched copy shows the defect alone
made the gate fail.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from probe_harness import PROBES_DIR, ROOT
from probe_harness.contracts import load_contracts
from probe_harness.gate import gate

BIN = ROOT / ".venv" / "bin"
GOOD = (PROBES_DIR / "fs_workspace_list.sh").read_text(encoding="utf-8")
EMIT = "emit-record \\\n"


def _probe(directory: Path, text: str, name: str = "fs_workspace_list") -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / f"{name}.sh"
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path


DEFECTS = {
    "wrong_shebang": (GOOD.replace("#!/usr/bin/env bash", "#!/bin/sh", 1), "line 1 must be exactly"),
    "no_strict_mode": (GOOD.replace("set -euo pipefail\n", "", 1), "must be 'set -euo pipefail'"),
    "strict_mode_late": (GOOD.replace("set -euo pipefail\n", "", 1).replace(
        'probe_version="1"\n', 'probe_version="1"\nset -euo pipefail\n'), "the first command must be"),
    "name_mismatch": (GOOD.replace('probe_name="fs_workspace_list"', 'probe_name="fs_other"'),
                      "probe_name 'fs_other' does not match the file name"),
    "unknown_capability": (GOOD.replace('primary_capability_id="cap_fs_read_workspace_tree"',
                                        'primary_capability_id="cap_fs_teleport"'),
                           "primary_capability_id 'cap_fs_teleport' is not in catalog linux_assay_v1"),
    "syntax_error": (GOOD.replace('if [[ ${op_rc}', 'if [[ ${op_rc', 1), "bash -n:"),
    "never_emits": (GOOD.replace(EMIT, "true \\\n"), "never called emit-record"),
    "emits_twice": (GOOD.replace(EMIT, 'emit-record --run-mode "${FENCE_RUN_MODE}" >/dev/null || true\n'
                                 + EMIT), "called emit-record 2 times"),
    "extra_stdout": (GOOD.replace(EMIT, "echo listing done\n" + EMIT), "printed to stdout besides"),
    "bad_status": (GOOD.replace('--status "${op_status}"', '--status "maybe"'), "invalid choice: 'maybe'"),
    "wrong_run_mode": (GOOD.replace('--run-mode "${FENCE_RUN_MODE}"', '--run-mode "read-only"'),
                       "differs from FENCE_RUN_MODE"),
    "hardcoded_emitter": (GOOD.replace(EMIT, f"{BIN}/emit-record \\\n"), "never called emit-record"),
    "exits_nonzero": (GOOD + "exit 3\n", "exited 3"),
}  # fmt: skip


@pytest.fixture(scope="module")
def contracts():
    return load_contracts()


def test_the_untouched_copy_passes(tmp_path: Path, contracts) -> None:
    assert gate(_probe(tmp_path / "probes", GOOD), tmp_path / "probes", contracts) == []


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_gate_rejects(defect: str, tmp_path: Path, contracts) -> None:
    text, message = DEFECTS[defect]
    assert text != GOOD
    problems = gate(_probe(tmp_path / "probes", text), tmp_path / "probes", contracts)
    assert any(message in p for p in problems), problems


def test_location_and_mode_bits(tmp_path: Path, contracts) -> None:
    elsewhere = _probe(tmp_path / "elsewhere", GOOD)
    assert "not a probe location" in gate(elsewhere, tmp_path / "probes", contracts)[0]
    plain = _probe(tmp_path / "probes", GOOD)
    plain.chmod(0o644)
    assert "not executable (chmod +x)" in gate(plain, tmp_path / "probes", contracts)


def test_cli_passes_every_shipped_probe_and_fails_a_bad_one(tmp_path: Path) -> None:
    shipped = subprocess.run([BIN / "probe-contract-gate"], capture_output=True, text=True, check=False)
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stderr.count("PASS") == len(list(PROBES_DIR.glob("*.sh"))) >= 14
    bad = _probe(tmp_path / "probes", DEFECTS["emits_twice"][0])
    done = subprocess.run(
        [BIN / "probe-contract-gate", "--probes-dir", tmp_path / "probes", bad],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "called emit-record 2 times" in done.stderr
