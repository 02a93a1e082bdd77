"""Evasion corpus, on the real kernel: tricks that hid file changes and secret reads behind trusted paths.

Each technique main's telemetry filter let through silently (a write under a
loader or runtime path, a read or write through a procfs link, another process's
`/proc/<pid>/environ`, ptrace attach and process_vm_readv/writev) runs inside one
observed run, as an unprivileged user and as root. Every action must be a line of
the archive naming the real file (or the process reached into), or keep the path as
written with a health note that names the count. Zero silent cases. New tricks go
here first; the pure stages are tested on synthetic records in tests/test_evasion_paths.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemon_support import Accounts, User
from tests.support import Archive, assay, assert_assay_accepts, run_observed, unique_run_id

pytestmark = pytest.mark.kernel

PROGRAMS = Path(__file__).resolve().parent / "programs"
TAG = secrets.token_hex(4)
SHM = f"/dev/shm/assaytest-{TAG}"
SHM_LINK = f"/dev/shm/assaytest-link-{TAG}"
USR_LIB = f"/usr/lib/assaytest-{TAG}.so.1"
LIB = f"/lib/assaytest-{TAG}"
PRELOAD = "/etc/ld.so.preload"
"""Opened for appending and closed with nothing written; when absent, created empty and removed at
once (an empty preload list loads nothing): never changed, never removed when it was there."""

SCRIPT = r"""
cd "$D"
P=$(cut -d" " -f4 /proc/self/stat)  # this shell's host pid (the command sees the host's /proc)
cat /proc/self/root$D/secret.txt
echo w > /proc/self/root$D/hidden-root.txt
cat /proc/thread-self/root$D/secret-thread.txt
cat /proc/$P/root$D/secret-parent.txt
echo w > /proc/$P/cwd/hidden-parent-cwd.txt
echo w > /proc/self/cwd/hidden-cwd.txt
cat /proc/self/cwd/../$(basename "$D")/secret-dotdot.txt
exec 3< "$D/fd-read.txt"; cat /dev/fd/3; cat /proc/self/fd/3; exec 3<&-
exec 4< "$D/fd-write.txt"; echo w > /proc/self/fd/4; exec 4<&-
(exec 0< "$D/stdin-write.txt"; echo w > /dev/stdin)
mkdir -p "$D/.local/lib/python3.11/site-packages" "$D/proj/node_modules/leftpad"
echo 'import os' > "$D/.local/lib/python3.11/site-packages/zz.pth"
echo 'module.exports = 1' > "$D/proj/node_modules/leftpad/index.js"
echo w > "$SHM"; rm -f "$SHM"
ln -s "$D/secret-linked.txt" "$SHM_LINK"; cat "$SHM_LINK"; rm -f "$SHM_LINK"
ln "$D/secret-hardlinked.txt" "$D/proj/node_modules/leftpad/k"; cat "$D/proj/node_modules/leftpad/k"
echo w > "$USR_LIB"; rm -f "$USR_LIB"
echo w > "$LIB"; rm -f "$LIB"
/usr/bin/python3 -c 'import os
p, there = "/etc/ld.so.preload", os.path.exists("/etc/ld.so.preload")
try:
    os.close(os.open(p, os.O_WRONLY | os.O_APPEND | (0 if there else os.O_CREAT), 0o644))
except OSError:
    pass
else:
    there or os.unlink(p)'
tr '\0' '\n' < /proc/$VICTIM/environ
cat /proc/$VICTIM/root$D/secret-victim-root.txt
cat /proc/$VICTIM/cwd/secret-victim-cwd.txt
mkdir -p "$D/usr/lib"
/usr/bin/python3 -c 'import ctypes, os
how = (ctypes.c_uint64 * 3)(os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, 0x10)  # RESOLVE_IN_ROOT
root = os.open(os.environ["D"], os.O_PATH)
ctypes.CDLL(None).syscall(437, root, b"/usr/lib/in-root.txt", ctypes.byref(how), 24)'
/usr/bin/python3 "$PEEK" "$D/peek.txt"
true
"""
SECRETS = ("secret.txt", "secret-thread.txt", "secret-parent.txt", "secret-dotdot.txt", "fd-read.txt",
           "secret-victim-root.txt", "secret-victim-cwd.txt", "secret-linked.txt", "secret-hardlinked.txt")
TARGETS = ("fd-write.txt", "stdin-write.txt")


@dataclass
class Observed:
    archive: Archive
    d: Path
    victim: int
    peek: list[int]
    """The child peek.py reached into (its pid in the run's pid namespace), and its ptrace,
    process_vm_readv and process_vm_writev results."""
    root: bool


@pytest.fixture(scope="module")
def user() -> Iterator[User]:
    accounts = Accounts()
    try:
        yield accounts.user("ev")
    finally:
        accounts.close()


def _cleanup() -> None:
    for path in (SHM, SHM_LINK, USR_LIB, LIB):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@pytest.fixture(scope="module", params=["user", "root"])
def observed(request: pytest.FixtureRequest, user: User,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    root = request.param == "root"
    d = user.home / f"ev-{request.param}-{TAG}"
    d.mkdir()
    for name in (*SECRETS, *TARGETS):
        (d / name).write_text("AWS_SECRET_ACCESS_KEY=not-a-real-key\n")
    uid, gid = (0, 0) if root else (user.uid, user.gid)
    for path in (d, *d.iterdir()):
        os.chown(path, uid, gid)
    out = tmp_path_factory.mktemp("out")
    victim = subprocess.Popen(["sleep", f"600.{secrets.randbelow(10**8)}"], cwd=d, user=uid, group=gid,
                              extra_groups=[],
                              env={"AWS_SECRET_ACCESS_KEY": "victim-secret", "PATH": "/usr/bin:/bin"})
    try:
        env = {"D": str(d), "SHM": SHM, "SHM_LINK": SHM_LINK, "USR_LIB": USR_LIB, "LIB": LIB,
               "VICTIM": str(victim.pid), "PEEK": str(PROGRAMS / "peek.py")}
        run_id = unique_run_id("evasion")
        proc = run_observed(out, run_id, "/usr/bin/env", *(f"{k}={v}" for k, v in env.items()),
                            "/bin/sh", "-c", SCRIPT, workdir=d,
                            extra=("--user", "root" if root else user.name))
        assert proc.returncode == 0, proc.stderr
        peek = [int(x) for x in (d / "peek.txt").read_text().split()]
        yield Observed(Archive(out / f"{run_id}.tar.gz"), d, victim.pid, peek, root)
    finally:
        victim.kill()
        victim.wait()
        _cleanup()
        shutil.rmtree(d, ignore_errors=True)


def _lines(o: Observed, value: str) -> list[tuple[str, str | None, str | None]]:
    """(kind, access mode, status) of each line whose value is `value`."""
    return [(e["kind"], e.get("access_mode"), e.get("status")) for e in o.archive.kernel
            if e["value"] == value]


def test_reads_through_procfs_links_name_the_real_file(observed: Observed) -> None:
    for name in SECRETS[:5]:
        assert ("openat", "read", None) in _lines(observed, f"{observed.d}/{name}"), name


def test_writes_through_procfs_links_name_the_real_file(observed: Observed) -> None:
    for name in ("hidden-root.txt", "hidden-parent-cwd.txt", "hidden-cwd.txt", *TARGETS):
        assert ("openat", "write", None) in _lines(observed, f"{observed.d}/{name}"), name


def test_an_openat2_in_root_write_names_the_file_under_its_dirfd(observed: Observed) -> None:
    assert ("openat", "write", None) in _lines(observed, f"{observed.d}/usr/lib/in-root.txt")
    assert (observed.d / "usr/lib/in-root.txt").is_file()  # the kernel wrote there, not /usr/lib


def test_writes_under_runtime_paths_are_evidence(observed: Observed) -> None:
    d = observed.d
    assert ("openat", "write", None) in _lines(observed, f"{d}/.local/lib/python3.11/site-packages/zz.pth")
    assert ("event_83", "write", None) in _lines(observed, f"{d}/proj/node_modules/leftpad/index.js")
    assert ("event_83", "write", None) in _lines(observed, SHM)
    status = None if observed.root else "error"  # the user's attempt is refused, and still evidence
    assert ("event_83", "write", status) in _lines(observed, USR_LIB)
    assert ("event_83", "write", status) in _lines(observed, LIB)
    preload_status = None if observed.root else "error"
    assert ("openat", "write", preload_status) in _lines(observed, PRELOAD)


def test_reads_through_links_the_run_made_under_runtime_paths_are_evidence(observed: Observed) -> None:
    """`ln -s secret /dev/shm/k; cat /dev/shm/k` and a hard link into node_modules: the link line
    names the secret, and the read through it is a line too (never folded as runtime noise)."""
    assert ("event_84", "read", None) in _lines(observed, SHM_LINK)
    assert ("event_84", "read", None) in _lines(observed, f"{observed.d}/proj/node_modules/leftpad/k")


def test_another_process_environ_is_evidence(observed: Observed) -> None:
    assert ("event_84", "read", None) in _lines(observed, f"/proc/{observed.victim}/environ")


def test_links_of_a_process_outside_the_run_keep_their_path_and_are_counted(observed: Observed) -> None:
    v, d = observed.victim, observed.d
    assert ("event_84", "read", None) in _lines(observed, f"/proc/{v}/root{d}/secret-victim-root.txt")
    assert ("event_84", "read", None) in _lines(observed, f"/proc/{v}/cwd/secret-victim-cwd.txt")
    assert any(n.startswith("s2_path_resolution: ") and "unresolved_proc_aliases=2" in n
               for n in observed.archive.health["notes"])


def test_ptrace_attach_and_process_vm_are_evidence(observed: Observed) -> None:
    child, attached, read, wrote = observed.peek
    assert (attached, read, wrote) == (0, 64, 64)  # the kernel let every reach through
    kinds = [k for k, _, _ in _lines(observed, f"pid:{child}")]
    assert kinds == ["event_80", "event_81", "event_82"]


def test_show_lists_the_runtime_writes_among_files_written(observed: Observed) -> None:
    proc = assay("show", "--no-spool", "--json", observed.archive.path)
    assert proc.returncode == 0, proc.stderr
    written = json.loads(proc.stdout)["summary"]["files_written"]
    assert {SHM, f"{observed.d}/hidden-root.txt"} <= set(written)
    assert (USR_LIB in written) == observed.root


def test_the_archive_is_valid_for_assay(observed: Observed) -> None:
    assert_assay_accepts(observed.archive.path)
