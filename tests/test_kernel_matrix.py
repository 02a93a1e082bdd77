"""The kernel matrix's CI row: Debian's 6.1 kernel (Debian 12's own) booted in an emulated guest.

scripts/kernel_matrix.py fetches the kernel (scripts/guest_kernels.sh: the Debian registry,
cached), boots it with virtme-ng over this machine's filesystem, and inside runs `doctor`, a
run for start-to-exec and the smoke tests (tests/test_run_kernel.py: one observed run's exec,
open, write and connect lines, health and validation; tests/test_kernel_path_kernel.py: one file
opened under five names, each line naming the real file, since 6.1 lets the monitor run its
security_file_open program: `path_source=kernel`; tests/test_witness_kernel.py: a git + python
job under strace -f, every call strace saw exactly one kernel line;
tests/test_netpolicy_rules_kernel.py: the network policy's programs load, and every edge of its rules
gets the policy model's verdict). 6.1 has no fchmodat2 (Linux 6.6) and no
setxattrat or removexattrat (6.13): they must be absent-by-kernel, not lost, and nothing else
may be missing. `make kernel-matrix`
runs the full list (docs/kernels.md). A few minutes under emulation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kernel

MATRIX = Path(__file__).resolve().parent.parent / "scripts" / "kernel_matrix.py"


def test_debian_6_1_guest_loads_the_monitor_and_passes_the_smoke_tests(tmp_path: Path) -> None:
    rows = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, MATRIX, "--kernels", "debian-6.1", "--tests", "smoke",
                           "--json", rows], capture_output=True, text=True, timeout=1800, check=False)
    assert rows.exists(), proc.stdout + proc.stderr
    [row] = json.loads(rows.read_text())
    assert row["release"].startswith("6.1."), row
    assert (row["error"], row["bpf_ok"]) == ("", True), row
    absent = ["fchmodat2", "removexattrat", "setxattrat"]  # Linux 6.6, 6.13, 6.13
    assert (row["absent_by_kernel"], row["lost"]) == (absent, []), row
    note = f"s2_kernel_hooks: absent_by_kernel={','.join(absent)} lost=none complete=true"
    assert row["hooks_note"] == note, row
    assert row["archive_valid"], row
    assert row["path_source"] == "kernel", row  # fentry on security_file_open works there
    assert row["failed"] == 0 and row["passed"] >= 22, row  # 11 + 7 + 3 + 1
    assert row["start_to_exec_s"] is not None and row["start_to_exec_s"] > 0, row
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"| debian-6.1 | {row['release']} | ok |" in proc.stdout
