"""Python view of `struct assay_hdr` (ebpf/assay_events.h).

The header is the one wire format between the kernel program and the
normalizer. tests/test_wire_layout.py compares this layout with the one clang
produces, so the two cannot drift apart silently.
"""

from __future__ import annotations

import struct

# ts, tgid, tid, hook, data_len, truncated, ret, a0, a1, a2, a3
HEADER = struct.Struct("<QIIHHIqqqqq")
HEADER_FIELDS = (
    "ts", "tgid", "tid", "hook", "data_len", "truncated", "ret", "a0", "a1", "a2", "a3",
)

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
HOOK_MAX = 46

TRUNC_FIRST = 1
TRUNC_SECOND = 2
TRUNC_ARGV = 4
TRUNC_UNREAD = 8
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
}
"""Hooks the monitor attaches, by id: the keys of drop counters and notes."""

NETWORK_HOOKS = frozenset({HOOK_CONNECT, HOOK_SENDTO, HOOK_SENDMSG})
