"""A run worker forked before its request arrives, so a run's start does not wait for the fork.

Forking the daemon (a Python process with the validator, the normalizer and
the policy code loaded) and setting up the child cost a few milliseconds of
every run's start-to-exec, more on a busy host. So the daemon keeps one
spare worker forked ahead: it has already dropped the daemon's loop,
sockets and signal plumbing and waits on a socket pair for its run. A run
request is handed to it with everything the run needs as descriptors
(SCM_RIGHTS, in `HANDOFF_FDS` order) and the request itself as a frame of
the daemon's protocol; the daemon then forks the next spare, after the run
has started. The spare reads the caller's credentials from the passed
connection (SO_PEERCRED is a property of the socket, not of who holds it),
so it learns nothing from the daemon that the kernel does not say.

A spare whose socket closes (the daemon stops or dies) exits without
doing anything.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

from runner.daemon import protocol
from runner.daemon.peer import Peer, peer_of

HANDOFF_FDS = ("conn", *protocol.RUN_FDS, "channel", "report")
"""What a run worker gets: the client's connection, the caller's descriptors, its run channel to
the sensor and the write end of its report pipe to the daemon."""

Serve = Callable[[socket.socket, list[int], protocol.RunStart, Peer, socket.socket, int], int]
"""The worker's life once handed a run: (connection, caller fds, request, peer, channel, report fd)."""


@dataclass
class Spare:
    pid: int
    handoff: socket.socket
    """The daemon's end of the pair the spare waits on."""

    def hand(self, conn: socket.socket, msg: protocol.RunStart, fds: list[int], channel: socket.socket,
             report_w: int) -> None:
        """Give the spare its run; raises OSError if it is gone (the caller forks another)."""
        protocol.send(self.handoff, msg, [conn.fileno(), *fds, channel.fileno(), report_w])
        self.handoff.close()

    def close(self) -> None:
        """Dismiss an unused spare: it sees the end of its socket and exits."""
        with contextlib.suppress(OSError):
            self.handoff.close()


def fork_spare(become_worker: Callable[[socket.socket], None], serve: Serve) -> Spare:
    """Fork a spare; in the child, `become_worker(its socket)` at once, then wait for a run."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the spare
        code = 1
        try:
            ours.close()
            become_worker(theirs)
            code = _wait_and_serve(theirs, serve)
        finally:
            os._exit(code)
    theirs.close()
    return Spare(pid=pid, handoff=ours)


def _wait_and_serve(sock: socket.socket, serve: Serve) -> int:
    reader = protocol.FrameReader(max_fds=len(HANDOFF_FDS))
    body = protocol.receive(sock, reader)
    fds = reader.take_fds()
    sock.close()
    if body is None or len(fds) != len(HANDOFF_FDS):
        for fd in fds:
            os.close(fd)
        return 0
    msg = protocol.decode_client(body)
    assert isinstance(msg, protocol.RunStart)
    conn_fd, *caller_fds, channel_fd, report_w = fds
    conn = socket.socket(fileno=conn_fd)
    return serve(conn, caller_fds, msg, peer_of(conn), socket.socket(fileno=channel_fd), report_w)
