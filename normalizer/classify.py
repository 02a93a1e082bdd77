"""Stage 4: turn resolved events into contract kinds with their values.

Kinds: 1 openat (open, openat, openat2, creat; an open the telemetry table
must not fold is 83 or 84, normalizer/telemetry.py), 2 connect, 4 exec, and
datagram peers from sendto/sendmsg as `event_6` / `event_7`; a failed
execve/execveat is `event_101` with the path it asked for (docs/artifacts.md
has the table of every `event_<id>`). Process-tree
and working-directory hooks are state for earlier stages, not evidence, and
stop here.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from functools import lru_cache

import msgspec

from ebpf.wire import (
    HOOK_CONNECT,
    HOOK_EXEC,
    HOOK_EXECVE,
    HOOK_NET_BLOCK,
    HOOK_OPEN,
    HOOK_SENDMSG,
    HOOK_SENDTO,
)
from normalizer.artifacts import AccessMode, OpenStatus, OperationFlag
from normalizer.paths import Resolved
from normalizer.telemetry import CHANGE_BITS, O_TMPFILE_BIT, is_telemetry_path, open_event_type
from normalizer.text import escape_bytes

KIND_BY_TYPE = {1: "openat", 2: "connect", 4: "exec", 10: "file_blocked", 20: "connect_blocked"}
FILE_BLOCKED = 10
CONNECT_BLOCKED = 20
EXEC_FAILED = 101
NETWORK_HOOKS = (HOOK_CONNECT, HOOK_SENDTO, HOOK_SENDMSG)
CLASSIFIED_HOOKS = frozenset({HOOK_OPEN, HOOK_EXEC, HOOK_EXECVE, HOOK_NET_BLOCK, *NETWORK_HOOKS})
"""The hooks `classify` can turn into evidence; it returns None for every other."""

O_ACCMODE = 0o3
ACCESS_MODES: tuple[AccessMode, ...] = ("read", "write", "read_write", "unknown")
O_EXCL = 0o200
# the open flags' meaning, in upstream's serialized order
OPERATION_FLAGS: tuple[tuple[OperationFlag, int], ...] = (
    ("create", 0o100),
    ("truncate", 0o1000),
    ("append", 0o2000),
    ("exclusive", O_EXCL),
)
UPSTREAM_EXCLUSIVE_BIT = 0o400
"""Upstream derives `exclusive` from 0o400 (crates/assay-runner-core/src/kernel/decode.rs:124),
which on Linux is O_NOCTTY, not O_EXCL (0o200); Assay checks the list against that derivation."""


def kind_name(event_type: int) -> str:
    """The contract's kind for a monitor id; unknown ids stay `event_<id>`."""
    return KIND_BY_TYPE.get(event_type, f"event_{event_type}")


class OpenMeta(msgspec.Struct, frozen=True, array_like=True):
    """Open syscall metadata, as the contract's optional kernel-event fields."""

    flags: int
    mode: int | None
    resolve: int | None
    return_value: int | None
    access_mode: AccessMode
    operation_flags: tuple[OperationFlag, ...] | None
    """A tuple, so a meta is hashable (the kernel-line writer memoizes on it); JSON: an array."""
    status: OpenStatus | None


def operation_flags(flags: int) -> tuple[OperationFlag, ...] | None:
    """The operation hints of `flags`, or None where Assay's derivation would contradict them.

    The list is what the bits mean. Assay reads `exclusive` as bit 0o400
    (see UPSTREAM_EXCLUSIVE_BIT), so when O_EXCL and O_NOCTTY disagree any
    true list fails its check: the hints are left out and `flags` (which
    always carries the bits) is the evidence (docs/artifacts.md).
    """
    if bool(flags & O_EXCL) != bool(flags & UPSTREAM_EXCLUSIVE_BIT):
        return None
    return tuple(name for name, bit in OPERATION_FLAGS if flags & bit)


def open_meta(flags: int, mode: int, resolve: int, ret: int) -> OpenMeta:
    """Derive the contract's open metadata from raw syscall values.

    A failed open keeps its return value (-errno: evidence of why) and
    `status: error`. A successful one's fd number is allocation state, not a
    capability, and races between threads of one process, so it stays in the
    raw spool only; and since the line schema requires `return_value`
    whenever `status` is present, a successful open carries neither: no
    `status` and no `return_value` means success (docs/artifacts.md).
    """
    flags &= 0xFFFFFFFF
    resolve &= 0xFFFFFFFFFFFFFFFF  # open_how.resolve: a u64 the caller picks, carried signed in the record
    creates = bool(flags & (0o100 | O_TMPFILE_BIT))
    failed = ret < 0
    return OpenMeta(
        flags=flags,
        mode=mode & 0o7777 if creates else None,
        resolve=resolve or None,
        return_value=ret if failed else None,
        access_mode=ACCESS_MODES[flags & O_ACCMODE],
        operation_flags=operation_flags(flags),
        status="error" if failed else None,
    )


cached_open_meta = lru_cache(maxsize=4096)(open_meta)
"""`open_meta` memoized: a success's fd number does not enter it (passed as 0), so an agent's
opens share a handful of (flags, mode, resolve, errno) shapes. The result is frozen."""


def endpoint(sockaddr: bytes) -> str | None:
    """A stable endpoint string: `1.2.3.4:80`, `[::1]:80`, `unix:/p`, `unix:@abstract`.

    None for an address family we do not decode (and for AF_UNSPEC, which
    dissolves an association rather than naming a peer).
    """
    if len(sockaddr) < 2:
        return None
    (family,) = struct.unpack_from("<H", sockaddr)
    if family == socket.AF_INET and len(sockaddr) >= 8:
        port = struct.unpack_from(">H", sockaddr, 2)[0]
        return f"{ipaddress.IPv4Address(sockaddr[4:8])}:{port}"
    if family == socket.AF_INET6 and len(sockaddr) >= 24:
        port = struct.unpack_from(">H", sockaddr, 2)[0]
        addr = ipaddress.IPv6Address(sockaddr[8:24])
        # spelled out: str() of a v4-mapped address changed in Python 3.13
        text = f"::ffff:{addr.ipv4_mapped}" if addr.ipv4_mapped else addr.compressed
        return f"[{text}]:{port}"
    if family == socket.AF_UNIX:
        path = sockaddr[2:]
        if not path:
            return "unix:"
        if path[0] == 0:
            return "unix:@" + escape_bytes(path[1:].rstrip(b"\0"))
        return "unix:" + escape_bytes(path.split(b"\0", 1)[0])
    return None


class Classified(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """An evidence candidate: contract kind, value, and open metadata if any.

    `order` is the record's position in ring order (the thread's own syscall
    order within a thread). `process`/`thread_rank` are filled only where the
    numbered tree is known (`normalizer.build.candidates`); the streaming
    writer takes them from the thread the event is filed under.
    """

    event_type: int
    kind: str
    value: str | None
    meta: OpenMeta | None
    order: int
    ts: int
    """Runner-clock capture time (syscall exit): only for correlation windows."""
    denied: str | None = None
    """For blocks: the access the policy refused (read, write, connect, send)."""
    process: int = 0
    thread_rank: int = 0


def classify(resolved: Resolved, order: int, file_denied: str | None = None) -> Classified | None:
    """The evidence candidate for one event, or None for state-only hooks.

    `file_denied` is the access the policy refused to this open, when the
    open was a policy block (normalizer/blocks.py).
    """
    e = resolved.item.event
    meta = None
    event_type = e.hook
    denied = None
    if e.hook == HOOK_OPEN:
        value = resolved.path
        meta = cached_open_meta(e.a1, e.a2, e.a3, min(e.ret, 0))
        if file_denied is not None:
            event_type, denied = FILE_BLOCKED, file_denied
        else:
            event_type = open_event_type(value, meta.flags, resolved.aliased)
    elif e.hook == HOOK_EXEC:
        value = resolved.path
    elif e.hook == HOOK_EXECVE:  # written only when the exec failed
        value = resolved.path
        event_type = EXEC_FAILED
    elif e.hook == HOOK_NET_BLOCK:
        value = endpoint(e.data)
        event_type = CONNECT_BLOCKED
        denied = "connect" if e.a0 == HOOK_CONNECT else "send"
    elif e.hook in NETWORK_HOOKS:
        if e.data[:2] == b"\0\0":  # AF_UNSPEC
            return None
        value = endpoint(e.data)
    else:
        return None
    return Classified(
        event_type=event_type,
        kind=kind_name(event_type),
        value=value,
        meta=meta,
        order=order,
        ts=e.ts,
        denied=denied,
    )


def is_telemetry(event: Classified) -> bool:
    """True for an `openat` read (no write, create or truncate) whose path the contract classes
    as telemetry."""
    return event.kind == "openat" and event.value is not None and event.meta is not None \
        and not event.meta.flags & CHANGE_BITS and is_telemetry_path(event.value)
