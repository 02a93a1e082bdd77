"""The supervisor of the command's seccomp filter: answers every refusal, and counts it.

The command's process installs the filter (runner/enforce/seccomp.py) with
a notification fd and hands the fd to the runner over a socket pair made
before the fork (`Handover`), then closes its own copy before exec: the
command never holds it (with it, it could answer its own calls "go on").
`Guard`'s thread receives each refused call (SECCOMP_IOCTL_NOTIF_RECV),
answers with the errno its class calls for, and counts it by class once
the answer reached the kernel, so a call interrupted and restarted counts
once. The classes are the health note's words (normalizer/refusals.py).
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass

from runner.enforce.seccomp import X32_SYSCALL_BIT, Machine, Rules, install, program
from runner.logs import get_logger

log = get_logger("seccomp")

NOTIF = struct.Struct("<QIIiIQ6Q")
"""struct seccomp_notif: id, pid, flags, then struct seccomp_data (nr, arch, ip, args[6])."""
RESP = struct.Struct("<QqiI")
"""struct seccomp_notif_resp: id, val, error, flags."""
IOCTL_RECV = (3 << 30) | (NOTIF.size << 16) | (ord("!") << 8) | 0
IOCTL_SEND = (3 << 30) | (RESP.size << 16) | (ord("!") << 8) | 1
JOIN_TIMEOUT = 5.0


def classify(rules: Rules, mach: Machine, arch: int, nr: int) -> tuple[str, int]:
    """(class, errno) of a call the filter sent to the supervisor."""
    abi = mach.native if arch == mach.native.arch else next((a for a in mach.compat if a.arch == arch), None)
    if abi is None:
        return "compat_unknown", errno.ENOSYS
    if abi is not mach.native and rules.refuse_compat:
        return f"compat_{abi.name}", errno.ENOSYS
    if abi is mach.native and mach.x32 and nr & X32_SYSCALL_BIT:
        if rules.refuse_compat:
            return "compat_x32", errno.ENOSYS
        nr &= ~X32_SYSCALL_BIT
    if nr in abi.io_uring:
        return "io_uring", errno.EPERM
    if nr in (abi.clone, abi.unshare):
        return "user_namespace", errno.EPERM
    return "unexpected", errno.ENOSYS


@dataclass(frozen=True)
class Handover:
    """What the command's process needs to install the filter and hand its fd over."""

    prog: bytes
    mach: Machine
    sock_fd: int

    def apply(self) -> None:
        """In the command's process, just before exec: install, send the fd, keep no copy."""
        listener = install(self.prog, self.mach)
        try:
            socket.send_fds(socket.socket(fileno=self.sock_fd), [b"l"], [listener])
        finally:
            os.close(listener)


class Guard:
    """The runner's side for one run: the socket pair now, the supervising thread after spawn."""

    def __init__(self, rules: Rules, mach: Machine) -> None:
        self.rules, self.mach = rules, mach
        self._ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.handover = Handover(program(rules, mach), mach, theirs.detach())
        self._theirs_closed = False
        self._stop_r, self._stop_w = os.pipe()
        self.refused: Counter[str] = Counter()
        self._thread = threading.Thread(target=self._serve, name="seccomp-supervisor", daemon=True)

    def start(self) -> None:
        """Once the command's process exists: drop the child's end, and serve."""
        self._drop_theirs()
        self._thread.start()

    def _drop_theirs(self) -> None:
        if not self._theirs_closed:
            self._theirs_closed = True
            os.close(self.handover.sock_fd)

    def finish(self) -> dict[str, int]:
        """Once the run's processes are gone: stop serving; the refusals by class."""
        os.write(self._stop_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=JOIN_TIMEOUT)
            if self._thread.is_alive():  # never seen: the run's end must not hang on it
                log.warning("seccomp.supervisor_stuck", counted=sum(self.refused.values()))
        return dict(sorted(self.refused.items()))

    def close(self) -> None:
        """Release everything (after `finish`, or when the run failed before the command started)."""
        if self._thread.is_alive():
            self.finish()
        self._drop_theirs()
        self._ours.close()
        for fd in (self._stop_r, self._stop_w):
            os.close(fd)

    def _serve(self) -> None:
        listener = self._receive()
        if listener is None:
            return
        try:
            self._answer_all(listener)
        finally:
            os.close(listener)

    def _receive(self) -> int | None:
        """The notification fd, or None when the command's process never sent one."""
        ready, _, _ = select.select([self._ours.fileno(), self._stop_r], [], [])
        if self._stop_r in ready:
            return None
        try:
            _, fds, _, _ = socket.recv_fds(self._ours, 1, 1)
        except OSError:
            return None
        for extra in fds[1:]:
            os.close(extra)
        return fds[0] if fds else None

    def _answer_all(self, listener: int) -> None:
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            events = dict(poller.poll())
            if self._stop_r in events:
                return
            if events.get(listener, 0) & select.POLLIN:
                self._answer_one(listener)
            elif listener in events:  # POLLHUP: every process under the filter is gone
                return

    def _answer_one(self, listener: int) -> None:
        buf = bytearray(NOTIF.size)
        try:
            fcntl.ioctl(listener, IOCTL_RECV, buf, True)
        except OSError as exc:  # ENOENT: the caller died or was interrupted before we looked
            log.debug("seccomp.recv_failed", error=exc.strerror)
            return
        ident, _pid, _flags, nr, arch, _ip, *_args = NOTIF.unpack(buf)
        kind, err = classify(self.rules, self.mach, arch, nr & 0xFFFFFFFF)
        try:
            fcntl.ioctl(listener, IOCTL_SEND, bytearray(RESP.pack(ident, 0, -err, 0)), True)
        except OSError:
            return  # the call is gone (killed, or restarted: it comes back and is counted then)
        self.refused[kind] += 1
