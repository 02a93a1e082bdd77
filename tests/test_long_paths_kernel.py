"""Paths at and over the kernel's 4095-byte limit: whole, or marked cut.

The kernel refuses a path argument of 4096 bytes or more, so a 4095-byte one
must be captured whole (not flagged), and a longer one is cut at 4095 bytes
and flagged: the flag reaches the raw spool and the value carries the
truncation marker, so two different long names never silently share a value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ebpf.wire import HOOK_EXEC, HOOK_OPEN, TRUNC_FIRST
from normalizer.decode import decode
from spool.format import read_spool
from tests.support import Archive, assay, run_observed

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
PROGRAMS = Path(__file__).resolve().parent / "programs"
ENAMETOOLONG = 36


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, list, Path]:
    out = tmp_path_factory.mktemp("out")
    work = tmp_path_factory.mktemp("work")
    proc = run_observed(out, "longpaths", PY, PROGRAMS / "long_paths.py", work, workdir=work)
    assert proc.returncode == 0, proc.stderr
    opens = [r for r in decode(read_spool(out / "longpaths.spool").records)
             if r.hook in (HOOK_OPEN, HOOK_EXEC) and r.data.startswith(b"./")]
    return Archive(out / "longpaths.tar.gz"), opens, work


def test_a_4095_byte_path_is_whole(observed) -> None:
    archive, opens, work = observed
    exact = [r for r in opens if r.ret >= 0 and r.hook == HOOK_OPEN]
    assert len(exact) == 1
    assert len(exact[0].data.rstrip(b"\0")) == 4095 and not exact[0].truncated
    reads = [e for e in archive.kernel if e["kind"] == "openat" and e["value"] == f"{work}/f"
             and e["access_mode"] == "read"]
    assert len(reads) == 1


def test_a_4095_byte_exec_path_is_whole(observed) -> None:
    """The exec path comes from the kernel's copy (sched_process_exec), tested like the others."""
    archive, records, work = observed
    (execs,) = [r for r in records if r.hook == HOOK_EXEC]
    assert len(execs.data.rstrip(b"\0")) == 4095 and not execs.truncated
    assert f"{work}/t" in archive.values("exec")


def test_longer_paths_are_flagged_cut(observed) -> None:
    _, opens, _ = observed
    cut = [r for r in opens if r.ret == -ENAMETOOLONG]
    assert len(cut) == 2
    assert all(r.truncated & TRUNC_FIRST and len(r.data.rstrip(b"\0")) == 4095 for r in cut)


def test_archive_validates(observed) -> None:
    archive, _, _ = observed
    proc = assay("validate", archive.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
