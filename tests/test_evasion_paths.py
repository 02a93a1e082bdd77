"""The telemetry filter folds only harmless reads of canonical paths (pure stages, synthetic records).

Each case is an evasion that main's filter let through silently: a write under a path the
contract's telemetry table names (`/usr/lib`, `/dev/shm`, `node_modules`, `.pth`), a read or a
write through a procfs link (`/proc/self/root`, `.../cwd`, `/proc/<pid>/...`, `/dev/std*`), a
`..` after such a link, another process's `/proc/<pid>/environ`. The records are appended to
the recorded example run (tests/data/example.spool) as its command's own; the archive must
name the real file (or keep the path as written and say so in health), in every way the
normalizer can take (C fast path, its Python twin, the general way alone) and stay valid for
the contract and for Assay. The kernel counterpart is tests/test_evasion_paths_kernel.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_normspeed import MODES, mode

from ebpf import wire
from normalizer import build, reopen, telemetry
from normalizer.build import normalize
from runner.evidence.archive import archive_bytes
from spool.format import Spool, read_spool
from tests.support import Archive, assert_assay_accepts

EXAMPLE = read_spool(Path(__file__).resolve().parent / "data" / "example.spool")
RECORDS = list(EXAMPLE.records)
FIELDS = dict(zip(wire.HEADER_FIELDS, wire.HEADER.unpack_from(RECORDS[2]), strict=True))
_SCANNED = build.scan(EXAMPLE).scan
CMD = next(iter(_SCANNED.tree.tasks))
"""The host tid of the example's command (its first task)."""
CWD = _SCANNED.resolver.cwd(_SCANNED.tree.tasks[CMD].process)
"""Its working directory when the example ends."""
STRANGER = 4_000_000
"""A host pid that is no task of the run."""
AT_FDCWD = 0xFFFFFF9C
O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_PATH = 0, 0o1, 0o2, 0o100, 0o1000, 0o10000000
WRITE = O_WRONLY | O_CREAT | O_TRUNC


def _open(path: bytes, flags: int, ret: int = 5, tid: int = CMD, dirfd: int = AT_FDCWD,
          resolve: int = 0) -> bytes:
    fields = {**FIELDS, "tgid": tid, "tid": tid, "hook": wire.HOOK_OPEN, "data_len": len(path) + 1,
              "truncated": 0, "ret": ret, "a0": dirfd, "a1": flags, "a2": 0o644, "a3": resolve}
    return wire.HEADER.pack(*(fields[f] for f in wire.HEADER_FIELDS)) + path + b"\0"


def _chdir(path: bytes, tid: int = CMD) -> bytes:
    fields = {**FIELDS, "tgid": tid, "tid": tid, "hook": wire.HOOK_CHDIR, "data_len": len(path) + 1,
              "truncated": 0, "ret": 0, "a0": 0, "a1": 0, "a2": 0, "a3": 0}
    return wire.HEADER.pack(*(fields[f] for f in wire.HEADER_FIELDS)) + path + b"\0"


def _normalized(records: list[bytes], tmp_path: Path) -> Archive:
    """The archive of the example run plus `records`, the same bytes in every way, conformant."""
    spool = Spool(header=EXAMPLE.header, records=RECORDS + records, phases=EXAMPLE.phases,
                  trailer=EXAMPLE.trailer)
    results = set()
    for name in MODES:
        with mode(name):
            run = normalize(spool)
            results.add(archive_bytes(run.run_id, run.members()))
    assert len(results) == 1
    path = tmp_path / "evasion.tar.gz"
    path.write_bytes(results.pop())
    return Archive(path)


def _lines(archive: Archive, value: str) -> list[dict]:
    return [e for e in archive.kernel if e["value"] == value]


@pytest.mark.parametrize(("path", "kind"), [
    ("/usr/lib/x.so.1", "event_83"),
    ("/lib/x", "event_83"),
    ("/dev/shm/x", "event_83"),
    (f"{CWD}/proj/node_modules/leftpad/index.js", "event_83"),
    ("/etc/ld.so.preload", "openat"),
    (f"{CWD}/.local/lib/python3.11/site-packages/zz.pth", "openat"),
])
def test_a_write_under_a_telemetry_path_is_evidence(path: str, kind: str, tmp_path: Path) -> None:
    """A write is never folded; where Assay refuses an `openat` of the path it is `event_83`
    (flags and access mode kept), and the summary counts it among the files written."""
    spool_records = [_open(path.encode(), WRITE), _open(path.encode(), O_RDONLY | O_TRUNC),
                     _open(path.encode(), O_RDONLY)]
    archive = _normalized(spool_records, tmp_path)
    lines = _lines(archive, path)
    assert [(e["kind"], e["access_mode"]) for e in lines] == [(kind, "write"), (kind, "read")]
    assert lines[0]["operation_flags"] == ["create", "truncate"]
    assert (path in archive.surface["filesystem_paths"]) == (kind == "openat")
    spool = Spool(header=EXAMPLE.header, records=RECORDS + spool_records, phases=EXAMPLE.phases,
                  trailer=EXAMPLE.trailer)
    assert path in normalize(spool).preview.written.first
    assert_assay_accepts(archive.path)


def test_a_read_of_a_telemetry_path_is_still_folded(tmp_path: Path) -> None:
    archive = _normalized([_open(b"/usr/lib/x.so.1", O_RDONLY), _open(b"/proc/self/environ", O_RDONLY),
                           _open(b"/proc/%d/environ" % CMD, O_RDONLY), _open(b"/dev/urandom", O_RDONLY)],
                          tmp_path)
    assert not [e for e in archive.kernel if e["value"] and e["value"].startswith(("/usr/lib/", "/proc/",
                                                                                  "/dev/"))]


@pytest.mark.parametrize(("raw", "real"), [
    (b"/proc/self/root/home/u/secret.txt", "/home/u/secret.txt"),
    (b"/proc/thread-self/root/home/u/secret.txt", "/home/u/secret.txt"),
    (b"/proc/%d/root/home/u/secret.txt" % CMD, "/home/u/secret.txt"),
    (b"/proc/%d/task/%d/root/home/u/secret.txt" % (CMD, CMD), "/home/u/secret.txt"),
    (b"/proc/self/root/../home/u/secret.txt", "/home/u/secret.txt"),
    (b"/proc/self/cwd/hidden.txt", f"{CWD}/hidden.txt"),
    (b"/proc/self/cwd/../hidden.txt", f"{CWD.rsplit('/', 1)[0]}/hidden.txt"),
    (b"/proc/%d/cwd/a/b" % CMD, f"{CWD}/a/b"),
    (b"/proc/self/root/proc/self/cwd/hidden.txt", f"{CWD}/hidden.txt"),
    (b"/tmp/../proc/self/root/usr/lib/../../home/u/x", "/home/u/x"),
])
@pytest.mark.parametrize("flags", [O_RDONLY, WRITE])
def test_a_procfs_link_resolves_to_the_file_it_names(raw: bytes, real: str, flags: int,
                                                      tmp_path: Path) -> None:
    archive = _normalized([_open(raw, flags)], tmp_path)
    assert [(e["kind"], e["access_mode"]) for e in _lines(archive, real)] == \
        [("openat", "write" if flags else "read")]
    assert not any("s2_path_resolution" in n for n in archive.health["notes"])


def test_a_relative_path_under_a_procfs_cwd_resolves(tmp_path: Path) -> None:
    """`cd /proc/self/root/home/u; echo > notes.txt`, and a `..` after the cwd link."""
    archive = _normalized([_chdir(b"/proc/self/root/home/u"), _open(b"notes.txt", WRITE),
                           _chdir(b"/proc"), _open(b"self/cwd/../x", O_RDONLY)], tmp_path)
    assert [e["kind"] for e in _lines(archive, "/home/u/notes.txt")] == ["openat"]
    assert [e["kind"] for e in _lines(archive, "/x")] == ["openat"]  # cwd /proc: /proc/.. is /


def test_a_reopen_through_dev_std_names_resolves(tmp_path: Path) -> None:
    """`exec 0</home/u/secret; echo x > /dev/stdin` writes the secret file."""
    archive = _normalized([_open(b"/home/u/secret", O_RDONLY, ret=0), _open(b"/dev/stdin", O_WRONLY)],
                          tmp_path)
    assert [e["access_mode"] for e in _lines(archive, "/home/u/secret")] == ["read", "write"]


@pytest.mark.parametrize("name", ["environ", "mem", "maps", "cmdline", "auxv", "task/%d/environ",
                                  "map_files/7f0000000000-7f0000001000"])
def test_another_process_secrets_read_through_proc_is_evidence(name: str, tmp_path: Path) -> None:
    path = f"/proc/{STRANGER}/" + (name % STRANGER if "%" in name else name)
    archive = _normalized([_open(path.encode(), O_RDONLY)], tmp_path)
    assert [e["kind"] for e in _lines(archive, path)] == ["event_84"]
    assert_assay_accepts(archive.path)


@pytest.mark.parametrize(("raw", "count"), [
    (f"/proc/{STRANGER}/root/home/u/secret.txt", "unresolved_proc_aliases=1"),
    (f"/proc/{STRANGER}/cwd/secret.txt", "unresolved_proc_aliases=1"),
    (f"/proc/{STRANGER}/fd/3", "unresolved_fd_reopens=1"),
    ("/dev/fd/42", "unresolved_fd_reopens=1"),
])
@pytest.mark.parametrize("flags", [O_RDONLY, WRITE])
def test_a_link_that_cannot_be_followed_keeps_its_path_and_health_says_so(
        raw: str, count: str, flags: int, tmp_path: Path) -> None:
    archive = _normalized([_open(raw.encode(), flags)], tmp_path)
    assert [e["kind"] for e in _lines(archive, raw)] == ["event_83" if flags else "event_84"]
    assert any(n.startswith("s2_path_resolution: ") and count in n for n in archive.health["notes"])
    assert_assay_accepts(archive.path)


def test_assay_filtered_paths_are_all_telemetry_candidates() -> None:
    """The C fast path leaves every telemetry candidate to Python, which decides `event_83`: so every
    path Assay filters must be a candidate (else C would file a write of it as `openat`)."""
    for path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/ssl/openssl.cnf", "/usr/pyvenv.cfg",
                 "/usr/bin/pyvenv.cfg", "/usr/bin/python3._pth", "/usr/bin/python3.12._pth",
                 "/usr/bin/pybuilddir.txt", "/lib/a", "/lib32/a", "/lib64/a", "/usr/lib/a",
                 "/usr/share/locale/a", "/proc/a", "/sys/a", "/dev/a", "/w/node_modules/a",
                 "/h/.rustup/toolchains/x/a.so", "/w/target/debug/a.so.1"):
        assert telemetry.assay_filters(path) and telemetry.could_be_telemetry(path), path


def test_the_walk_stops_at_an_unknown_link_and_keeps_the_rest_as_written() -> None:
    path, stuck, opener = reopen.walk("/proc/77/root/../x", lambda _link: None, 1, 1)
    assert (path, stuck, opener) == ("/proc/77/root/../x", reopen.Link("77", "root"), True)
    assert reopen.walk("/home/proc/x", lambda _link: "/", 1, 1) == ("/home/proc/x", None, False)


def test_show_counts_a_runtime_write_among_files_written(tmp_path: Path) -> None:
    from runner.review.view import build_view

    archive = _normalized([_open(b"/usr/lib/x.so.1", WRITE)], tmp_path)
    view = build_view(archive.path, archive.members, None)
    assert "/usr/lib/x.so.1" in view.summary.files_written
    assert json.dumps(view.summary.files_written)


def _reach(hook: int, a0: int, a1: int, ret: int) -> bytes:
    fields = {**FIELDS, "tgid": CMD, "tid": CMD, "hook": hook, "data_len": 0, "truncated": 0, "ret": ret,
              "a0": a0, "a1": a1, "a2": 0, "a3": 0}
    return wire.HEADER.pack(*(fields[f] for f in wire.HEADER_FIELDS))


def test_ptrace_attach_and_process_vm_are_lines_naming_the_target(tmp_path: Path) -> None:
    """ptrace ATTACH (16) and TRACEME (0), process_vm_readv and a refused process_vm_writev."""
    archive = _normalized([_reach(wire.HOOK_PTRACE, 16, 7, 0), _reach(wire.HOOK_PTRACE, 0, 0, 0),
                           _reach(wire.HOOK_PROCESS_VM, 7, 0, 64), _reach(wire.HOOK_PROCESS_VM, 7, 1, -1)],
                          tmp_path)
    lines = [(e["kind"], e["value"]) for e in archive.kernel if e["kind"].startswith(("event_8", "event_38"))]
    assert lines == [("event_80", "pid:7"), ("event_80", None), ("event_81", "pid:7"), ("event_382", "pid:7")]


@pytest.mark.parametrize(("raw", "real"), [
    (b"/usr/lib/x.so.1", "/home/u/proj/usr/lib/x.so.1"),
    (b"../../../.bashrc", "/home/u/proj/.bashrc"),
    (b"/a/../../b", "/home/u/proj/b"),
])
def test_openat2_in_root_resolves_under_its_dirfd(raw: bytes, real: str, tmp_path: Path) -> None:
    """openat2(dirfd, "/usr/lib/x.so.1", RESOLVE_IN_ROOT) writes under the dirfd, not /usr/lib;
    the same bytes under another dirfd (and the same fd number in another process) elsewhere."""
    resolve_in_root = 0x10
    archive = _normalized([_open(b"/home/u/proj", O_PATH, ret=9),
                           _open(raw, WRITE, dirfd=9, resolve=resolve_in_root),
                           _open(b"/home/u/other", O_PATH, ret=9),
                           _open(raw, WRITE, dirfd=9, resolve=resolve_in_root)], tmp_path)
    assert [e["kind"] for e in _lines(archive, real)] == ["openat"]
    assert [e["kind"] for e in _lines(archive, real.replace("proj", "other"))] == ["openat"]


def _link(hook: int, old: bytes, new: bytes, ret: int = 0) -> bytes:
    """A symlink (old: the target text) or a hard link or rename, relative to the cwd."""
    data = old + b"\0" + new + b"\0"
    a0, a1 = (AT_FDCWD, 0) if hook == wire.HOOK_SYMLINK else (AT_FDCWD, AT_FDCWD)
    fields = {**FIELDS, "tgid": CMD, "tid": CMD, "hook": hook, "data_len": len(data), "truncated": 0,
              "ret": ret, "a0": a0, "a1": a1, "a2": 0, "a3": 0}
    return wire.HEADER.pack(*(fields[f] for f in wire.HEADER_FIELDS)) + data


@pytest.mark.parametrize(("hook", "link", "read"), [
    (wire.HOOK_SYMLINK, b"/dev/shm/k", b"/dev/shm/k"),
    (wire.HOOK_LINK, b"/w/proj/node_modules/k", b"/w/proj/node_modules/k"),
    (wire.HOOK_RENAME, b"/w/proj/node_modules/d", b"/w/proj/node_modules/d/id_rsa"),
    (wire.HOOK_SYMLINK, b"/w/.local/lib/python3.11/k", b"/w/.local/lib/python3.11/k"),
])
def test_a_read_through_a_link_the_run_made_under_a_telemetry_path_is_evidence(
        hook: int, link: bytes, read: bytes, tmp_path: Path) -> None:
    """`ln -s ~/.ssh/id_rsa /dev/shm/k; cat /dev/shm/k`: the read of the secret hides behind a
    telemetry path unless a link the run made there keeps it. The same read before the link
    (remembered as folded by the scan's memo) stays folded; an unrelated read stays folded."""
    archive = _normalized([_open(read, O_RDONLY), _link(hook, b"/home/u/.ssh/id_rsa", link),
                           _open(read, O_RDONLY), _open(b"/dev/shm/other", O_RDONLY)], tmp_path)
    opens = [e["kind"] for e in _lines(archive, read.decode()) if "access_mode" in e]
    assert opens == ["event_84"]
    assert not _lines(archive, "/dev/shm/other")

