"""An independent recount of the correlation report's per-tool-call kernel event counts.

Counted from the raw ring records of a spool (the wire decoder, then nothing
of the normalizer): the windows straight from the SDK frames, evidence hooks
listed from the wire, the contract's telemetry table written here as globs.
Shared by the kernel tests (tests/test_policy_kernel.py) and the recorded-spool
tests (tests/test_recorded_spools.py), so the same witness runs with and without root.
"""

from __future__ import annotations

import errno
import fnmatch
import os

from ebpf.wire import (
    HOOK_BIND,
    HOOK_CHMOD,
    HOOK_CHOWN,
    HOOK_CHROOT,
    HOOK_CONNECT,
    HOOK_EXEC,
    HOOK_EXECVE,
    HOOK_FSMOUNT,
    HOOK_IO_URING,
    HOOK_LINK,
    HOOK_MEMFD,
    HOOK_MKDIR,
    HOOK_MKNOD,
    HOOK_MOUNT,
    HOOK_MOVE_MOUNT,
    HOOK_NET_BLOCK,
    HOOK_NEWTASK,
    HOOK_OPEN,
    HOOK_OPEN_BY_HANDLE,
    HOOK_OPEN_TREE,
    HOOK_PIVOT_ROOT,
    HOOK_PROCESS_VM,
    HOOK_PTRACE,
    HOOK_RENAME,
    HOOK_SENDMSG,
    HOOK_SENDTO,
    HOOK_SETNS,
    HOOK_SYMLINK,
    HOOK_TRUNCATE,
    HOOK_UMOUNT,
    HOOK_UNLINK,
    HOOK_UNSHARE,
    HOOK_UTIMES,
    HOOK_XATTR,
)
from normalizer.decode import RawEvent, decode
from spool.format import Spool

AT_FDCWD = 0xFFFFFF9C  # -100 as the monitor's unsigned argument
TWO_LINE_HOOKS = {HOOK_RENAME: 2, HOOK_LINK: 2, HOOK_SYMLINK: 2, HOOK_MOUNT: 2, HOOK_PIVOT_ROOT: 2,
                  HOOK_MOVE_MOUNT: 2, HOOK_XATTR: 2}
FS_CHANGE_HOOKS = (HOOK_UNLINK, HOOK_RENAME, HOOK_MKDIR, HOOK_MKNOD, HOOK_SYMLINK, HOOK_LINK,
                   HOOK_TRUNCATE, HOOK_CHMOD, HOOK_IO_URING, HOOK_OPEN_BY_HANDLE,
                   HOOK_UNSHARE, HOOK_SETNS, HOOK_MOUNT, HOOK_UMOUNT, HOOK_PIVOT_ROOT, HOOK_CHROOT,
                   HOOK_OPEN_TREE, HOOK_MOVE_MOUNT, HOOK_FSMOUNT, HOOK_CHOWN, HOOK_UTIMES, HOOK_XATTR,
                   HOOK_BIND, HOOK_MEMFD)
"""docs/artifacts.md's event_120..141 and event_160..181 sources, listed here from the wire,
not from the normalizer."""
CLONE_NEW_BITS = 0x7E020080
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME: a task made with
any of them is an event_162 line."""
TELEMETRY_GLOBS = (
    # shared/spec/runner-artifacts-v0.md, "Telemetry Versus Evidence", row by row as globs
    "/etc/ld.so.cache", "/lib/*", "/lib32/*", "/lib64/*", "/usr/lib/*",
    "/usr/share/locale/*", "/etc/localtime", "*/lib/python3*/*", "*/lib/python3*.zip",
    "*/pyvenv.cfg", "*/pybuilddir.txt", "*._pth",  # Python bootstrap probes (docs/artifacts.md)
    "*/.rustup/toolchains/*.so*", "*/target/*/build/*.so*", "*/target/*/debug/*.so*",
    "*/target/*/release/*.so*", "node_modules/*", "*/node_modules/*",
    "/proc", "/proc/*", "/sys", "/sys/*", "/dev", "/dev/*",
    # upstream's own list adds these (kernel/decode.rs:170-192)
    "/etc/ld.so.preload", "/usr/share/locale-langpack/*", "/etc/ssl/openssl.cnf",
)
"""The contract's telemetry table, written here from the spec as globs, independently of
normalizer/telemetry.py's regex: the recount below must not share the code it checks."""
MAY_CHANGE = 0o3 | 0o100 | 0o1000 | 0o20000000
"""Write access (1, 2, 3), O_CREAT, O_TRUNC, O_TMPFILE: such an open is never telemetry
(docs/artifacts.md, "The telemetry table folds reads only")."""


def is_telemetry_path(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, glob) for glob in TELEMETRY_GLOBS)


def windows(spool: Spool) -> dict[str, tuple[int, int]]:
    """tool_call_id -> (started, finished) runner-clock stamps, straight from the SDK frames."""
    started = {m.tool_call_id: m.ts for m in spool.sdk if m.event == "tool_call_started"}
    finished = {m.tool_call_id: m.ts for m in spool.sdk if m.event == "tool_call_finished"}
    assert started.keys() == finished.keys()
    return {str(i): (started[i], finished[i]) for i in started}


def _raw_path(r: RawEvent, workdir: str) -> str:
    path = r.data.split(b"\0", 1)[0].decode()
    assert path.startswith("/") or r.a0 == AT_FDCWD, "the fixtures open relative to the cwd only"
    return os.path.normpath(os.path.join(workdir, path))


def raw_counts(spool: Spool) -> dict[str, int]:
    """The same count from the raw ring records alone (decode, then nothing of the normalizer).

    Evidence is: records of the command's processes (not the runner's helper
    or shim) from the open, connect, exec, failed-exec, datagram,
    policy-block, file-system-change, ptrace and process_vm hooks (rename,
    link and symlink are two lines each);
    not the EPERM connect/send that a policy-block record of the same thread
    stands for; not AF_UNSPEC connects; not telemetry opens (reads only).
    """
    control = {*spool.header.control_pids, spool.header.shim_pid}
    wins = windows(spool)
    counts = dict.fromkeys(wins, 0)
    awaiting: set[int] = set()
    for r in sorted(decode(spool.records), key=lambda r: (r.ts, r.arrival)):
        if r.tgid in control:
            continue
        if r.hook == HOOK_NET_BLOCK:
            awaiting.add(r.tid)
        elif r.hook in (HOOK_CONNECT, HOOK_SENDTO, HOOK_SENDMSG):
            if r.tid in awaiting:
                awaiting.discard(r.tid)
                if r.ret == -errno.EPERM:
                    continue
            if r.data[:2] == b"\0\0":
                continue
        elif r.hook == HOOK_OPEN:
            if not r.a1 & MAY_CHANGE and is_telemetry_path(_raw_path(r, spool.header.workdir)):
                continue
        elif r.hook == HOOK_NEWTASK:
            if not r.a1 & CLONE_NEW_BITS:
                continue
        elif r.hook not in (HOOK_EXEC, HOOK_EXECVE, HOOK_PTRACE, HOOK_PROCESS_VM, *FS_CHANGE_HOOKS):
            continue
        for call, (start, end) in wins.items():
            if start <= r.ts <= end:
                counts[call] += TWO_LINE_HOOKS.get(r.hook, 1)
    return counts
