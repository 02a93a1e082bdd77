"""The file-system changes the runner once left unobserved, checked against strace.

The command is strace running tests/programs/fs_ops.py inside the observed
run: each mkdir, rename, link, symlink, truncate, chmod (setuid/setgid
flagged), unlink and rmdir, in plain and dirfd-relative forms, their failed
attempts, a failed exec, io_uring_setup and open_by_handle_at. What strace
saw must be exactly the `event_<id>` lines of the kernel layer
(normalizer/fsops.py has the id table).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from normalizer.fsops import FAILED, rename_pairs
from tests.strace_witness import Call, calls, expected
from tests.support import Archive, assay, run_observed

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
PROGRAMS = Path(__file__).resolve().parent / "programs"
TRACED = ("mkdir,mkdirat,unlink,unlinkat,rmdir,rename,renameat,renameat2,link,linkat,symlink,"
          "symlinkat,mknod,mknodat,truncate,chmod,fchmod,fchmodat,io_uring_setup,open_by_handle_at,execve")


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, list[Call], Path]:
    out = tmp_path_factory.mktemp("out")
    work = tmp_path_factory.mktemp("work")
    witness = out / "strace.txt"
    proc = run_observed(out, "fsops", "strace", "-f", "-qq", "-y", "-s", "4096", "-e", f"trace={TRACED}",
                        "-o", witness, PY, PROGRAMS / "fs_ops.py", work, workdir=work)
    assert proc.returncode == 0, proc.stderr
    return Archive(out / "fsops.tar.gz"), calls(witness), work


def test_every_operation_strace_saw_is_a_kernel_line(observed) -> None:
    archive, witness, work = observed
    want: Counter[tuple[int, str | None]] = Counter()
    kernel_paths = "s2_path_source: path_source=user_memory" not in archive.health["notes"]
    for call in witness:
        for event_type, value in expected(call):
            if (event_type, kernel_paths) == (141, True):  # the kernel names the file a handle opened
                value = f"{work}/g3"
            want[(event_type + (FAILED if call.ret < 0 else 0), value)] += 1
    got = Counter((e["event_type"], e["value"]) for e in archive.kernel
                  if 101 <= e["event_type"] < 300 and e["event_type"] not in (110, 111))
    assert got == want
    # the attack's ingredients are all there, so equality above is not vacuous
    kinds = {t for t, _ in want}
    assert {120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 140, 141,
            101, 220, 222, 224} <= kinds, sorted(kinds)
    assert (126, "g") in want and (131, f"{work}/g") in want


def test_two_path_lines_are_adjacent_pairs(observed) -> None:
    archive, _, work = observed
    lines = [(e["pid"], e["event_type"], e["value"]) for e in archive.kernel]
    assert (f"{work}/f", f"{work}/g") in [(old, new) for _, old, new in rename_pairs(lines)]
    assert (f"{work}/g2", f"{work}/g3") in [(old, new) for _, old, new in rename_pairs(lines)]


def test_untraced_io_is_in_health_and_not_claimed(observed) -> None:
    archive, _, _ = observed
    health = archive.health
    note = next(n for n in health["notes"] if n.startswith("s2_untraced_io: "))
    assert "io_uring_setup=1" in note and "open_by_handle_at=1" in note
    assert health["cgroup_correlation"] == "partial"  # never PASSING: those operations are unseen
    assert health["network_protocol_coverage"] == "unknown"
    assert health["network_endpoint_claim_scope"] == "unknown"


def test_archive_validates(observed) -> None:
    archive, _, _ = observed
    proc = assay("validate", archive.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
