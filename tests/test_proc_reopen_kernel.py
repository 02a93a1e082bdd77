"""Reopens through /proc/self/fd/N and its spellings resolve to their targets.

The attack (tests/programs/proc_reopen.py): an O_PATH fd reopened for writing
through procfs, which main recorded as a /proc read and then dropped as /proc
noise. strace -y, run inside the same observed run, is the witness: for each
successful reopen it prints the path of the fd the kernel returned; the kernel
layer must show that path with the reopen's own access mode.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.strace_witness import calls
from tests.support import Archive, assay, run_observed

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
PROGRAMS = Path(__file__).resolve().parent / "programs"
REOPEN = re.compile(r"^/(proc/[^/]+(/task/\d+)?|dev)/fd/\d+$")
ACCESS = {"O_RDONLY": "read", "O_WRONLY": "write", "O_RDWR": "read_write"}


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, list, Path]:
    out = tmp_path_factory.mktemp("out")
    work = tmp_path_factory.mktemp("work")
    witness = out / "strace.txt"
    proc = run_observed(out, "reopen", "strace", "-f", "-qq", "-y", "-s", "4096", "-e", "trace=openat",
                        "-o", witness, PY, PROGRAMS / "proc_reopen.py", work, workdir=work)
    assert proc.returncode == 0, proc.stderr
    return Archive(out / "reopen.tar.gz"), calls(witness), work


def _access(flags: str) -> str:
    return ACCESS[next(f for f in ACCESS if f in flags)]


def test_each_reopen_is_the_target_with_the_reopen_access(observed) -> None:
    archive, witness, work = observed
    target = f"{work}/target"
    reopens = [c for c in witness if c.name == "openat" and REOPEN.match(c.text(1)) and c.ret >= 0]
    assert len(reopens) == 4 and all(c.ret_path == target for c in reopens), [c.args for c in reopens]
    # every successful open strace saw land on the target, by access mode, is a line of the target
    want = Counter(_access(c.args[2]) for c in witness
                   if c.name == "openat" and c.ret >= 0 and c.ret_path == target)
    got = Counter(e["access_mode"] for e in archive.kernel if e["kind"] == "openat" and e["value"] == target)
    assert got == want
    assert want["write"] >= 3  # the create, the /proc/self/fd write, the child's /proc/<pid> append
    assert not [e for e in archive.kernel if e["kind"] == "openat" and e["value"]
                and e["value"].startswith(("/proc/", "/dev/fd/"))]


def test_reopen_of_a_reused_fd_number_is_unknown_not_the_old_file(observed) -> None:
    archive, witness, work = observed
    failed = [c for c in witness if c.name == "openat" and REOPEN.match(c.text(1)) and c.ret < 0]
    assert len(failed) == 1  # the socket: procfs refuses to reopen it
    other = [e for e in archive.kernel if e["kind"] == "openat" and e["value"] == f"{work}/other"]
    assert len(other) == 1  # only the real open; the reopen of its old number is not it
    kept = [e for e in archive.kernel if e["kind"] == "event_84"]  # a read of a link not followed
    assert len(kept) == 1 and kept[0]["status"] == "error" and REOPEN.match(kept[0]["value"])
    assert any(n.startswith("s2_path_resolution: ") and "unresolved_fd_reopens=1" in n
               for n in archive.health["notes"])


def test_archive_validates(observed) -> None:
    archive, _, _ = observed
    proc = assay("validate", archive.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
