"""Who is on the other end of the socket, from the kernel, and whether they may use us.

SO_PEERCRED gives the pid, uid and gid the peer had when it connected;
SO_PEERGROUPS its supplementary groups then. Both come from the kernel, not
from anything the peer says, and the command later runs with exactly these
ids, so a caller can never get more than it had.
"""

from __future__ import annotations

import contextlib
import ctypes
import grp
import os
import pwd
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from runner.capture.spawn import Credentials

SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
_PEERCRED = struct.Struct("iII")
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...]

    @property
    def credentials(self) -> Credentials:
        return Credentials(uid=self.uid, gid=self.gid, groups=self.groups)

    def describe(self) -> str:
        with contextlib.suppress(KeyError):
            return f"{pwd.getpwuid(self.uid).pw_name} (uid {self.uid})"
        return f"uid {self.uid}"


def peer_of(conn: socket.socket) -> Peer:
    pid, uid, gid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    raw = conn.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 1024)  # 256 groups: Python's most
    groups = struct.unpack(f"{len(raw) // 4}I", raw)
    return Peer(pid=pid, uid=uid, gid=gid, groups=tuple(sorted(set(groups))))


def refusal(peer: Peer, allowed_gids: frozenset[int], allowed_names: tuple[str, ...]) -> str | None:
    """Why `peer` may not use the daemon, or None: root always may, others need an allowed group."""
    if peer.uid == 0 or allowed_gids & {peer.gid, *peer.groups}:
        return None
    names = ", ".join(allowed_names) or "none: only root may use this daemon"
    return (f"{peer.describe()} is not in a group allowed to use the assay-runner daemon "
            f"(allowed: {names}); ask the operator to add you, or run 'assay-runner run --direct' as root")


def group_name(gid: int) -> str:
    with contextlib.suppress(KeyError):
        return grp.getgrgid(gid).gr_name
    return str(gid)


@contextlib.contextmanager
def filesystem_identity(creds: Credentials) -> Iterator[None]:
    """Create, rename and open files as `creds` (fsuid/fsgid), in this thread only (evidence delivery).

    Leaving root's fsuid drops the filesystem capabilities (DAC override and
    friends) from the effective set, so the kernel checks the caller's own
    permissions and new files belong to the caller. The supplementary groups
    must already be the caller's (`os.setgroups` in the run worker).
    """
    _set(_libc.setfsgid, creds.gid)
    _set(_libc.setfsuid, creds.uid)
    try:
        yield
    finally:
        _set(_libc.setfsuid, 0)
        _set(_libc.setfsgid, 0)


def _set(call: ctypes._NamedFuncPointer, value: int) -> None:
    call(value)
    if call(-1) != value:  # -1 is invalid: returns the current value unchanged
        raise OSError(f"{call.__name__}({value}) did not take effect")


def caller_may_write(dir_fd: int, creds: Credentials) -> bool:
    """Whether `creds` may create files in the directory `dir_fd` (checked by the kernel as them)."""
    with filesystem_identity(creds):
        return os.access(".", os.W_OK | os.X_OK, dir_fd=dir_fd, effective_ids=True)
