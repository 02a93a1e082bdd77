"""Python view of `struct assay_hdr` (ebpf/assay_events.h).

The header is the one wire format between the kernel program and the
normalizer. tests/test_wire_layout.py compares this layout with the one clang
produces, so the two cannot drift apart silently.
"""

from __future__ import annotations

import struct

# ts, tgid, tid, hook, data_len, truncated, run, ret, a0, a1, a2, a3
HEADER = struct.Struct("<QIIHHHHqqqqq")
HEADER_FIELDS = (
    "ts", "tgid", "tid", "hook", "data_len", "truncated", "run", "ret", "a0", "a1", "a2", "a3",
)
RUN = struct.Struct("<H")
RUN_OFFSET = 22
"""Where a record's run key is: readers demultiplex with `RUN.unpack_from(rec, RUN_OFFSET)`."""
DEFAULT_RINGBUF_PAGES = 1024
"""4 MiB: zero drops on our open-heavy benchmark (direct mode's ring; the daemon has its own size)."""
RUN_SLOTS = 64
"""Runs live at once; a run key's counters are at slot key % RUN_SLOTS, slot 0 is the unknown run."""

HOOK_OPEN = 1
HOOK_CONNECT = 2
HOOK_EXEC = 4
HOOK_SENDTO = 6
HOOK_SENDMSG = 7
HOOK_NEWTASK = 32
HOOK_CHDIR = 33
HOOK_FCHDIR = 34
HOOK_NET_BLOCK = 40
HOOK_EXEC_ARGV = 41
HOOK_EXECVE = 42
HOOK_EXIT = 43
HOOK_SIGNAL = 44
HOOK_PROC_EXIT = 45
HOOK_CGROUP_ATTACH = 46
HOOK_CLOSE = 47
HOOK_CLOSE_RANGE = 48
HOOK_DUP = 49
HOOK_UNLINK = 50
HOOK_RENAME = 51
HOOK_MKDIR = 52
HOOK_SYMLINK = 53
HOOK_LINK = 54
HOOK_TRUNCATE = 55
HOOK_CHMOD = 56
HOOK_IO_URING = 57
HOOK_OPEN_BY_HANDLE = 58
HOOK_MKNOD = 59
HOOK_UNSHARE = 60
HOOK_SETNS = 61
HOOK_MOUNT = 62
HOOK_UMOUNT = 63
HOOK_PIVOT_ROOT = 64
HOOK_CHROOT = 65
HOOK_OPEN_TREE = 66
HOOK_MOVE_MOUNT = 67
HOOK_FSMOUNT = 68
HOOK_CHOWN = 69
HOOK_UTIMES = 70
HOOK_XATTR = 71
HOOK_BIND = 72
HOOK_MEMFD = 73
HOOK_PTRACE = 80
HOOK_PROCESS_VM = 81
HOOK_FILE_OPEN = 85
HOOK_MAX = 96

TRUNC_FIRST = 1
TRUNC_SECOND = 2
TRUNC_ARGV = 4
TRUNC_UNREAD = 8
TRUNC_ARGS = 16
RET_INTERRUPTED = 32
"""`truncated` bits (ebpf/assay_events.h)."""

HOOK_NAMES = {
    HOOK_OPEN: "open",
    HOOK_CONNECT: "connect",
    HOOK_EXEC: "exec",
    HOOK_SENDTO: "sendto",
    HOOK_SENDMSG: "sendmsg",
    HOOK_NEWTASK: "newtask",
    HOOK_CHDIR: "chdir",
    HOOK_FCHDIR: "fchdir",
    HOOK_NET_BLOCK: "net_block",
    HOOK_EXEC_ARGV: "exec_argv",
    HOOK_EXECVE: "execve",
    HOOK_EXIT: "exit",
    HOOK_SIGNAL: "signal",
    HOOK_PROC_EXIT: "proc_exit",
    HOOK_CGROUP_ATTACH: "cgroup_attach",
    HOOK_CLOSE: "close",
    HOOK_CLOSE_RANGE: "close_range",
    HOOK_DUP: "dup",
    HOOK_UNLINK: "unlink",
    HOOK_RENAME: "rename",
    HOOK_MKDIR: "mkdir",
    HOOK_SYMLINK: "symlink",
    HOOK_LINK: "link",
    HOOK_TRUNCATE: "truncate",
    HOOK_CHMOD: "chmod",
    HOOK_IO_URING: "io_uring_setup",
    HOOK_OPEN_BY_HANDLE: "open_by_handle_at",
    HOOK_MKNOD: "mknod",
    HOOK_UNSHARE: "unshare",
    HOOK_SETNS: "setns",
    HOOK_MOUNT: "mount",
    HOOK_UMOUNT: "umount",
    HOOK_PIVOT_ROOT: "pivot_root",
    HOOK_CHROOT: "chroot",
    HOOK_OPEN_TREE: "open_tree",
    HOOK_MOVE_MOUNT: "move_mount",
    HOOK_FSMOUNT: "fsmount",
    HOOK_CHOWN: "chown",
    HOOK_UTIMES: "utimes",
    HOOK_XATTR: "xattr",
    HOOK_BIND: "bind",
    HOOK_MEMFD: "memfd_create",
    HOOK_PTRACE: "ptrace",
    HOOK_PROCESS_VM: "process_vm",
    HOOK_FILE_OPEN: "file_open",
}
"""Hooks the monitor attaches, by id: the keys of drop counters and notes."""

NETWORK_HOOKS = frozenset({HOOK_CONNECT, HOOK_SENDTO, HOOK_SENDMSG})
