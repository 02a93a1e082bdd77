"""A frame reader takes no byte of the next frame: the daemon's server reads a run's request and
hands the connection to the run's worker, so whatever the client sent right behind the request
(an `Interrupt` for a Ctrl-C while the request was going out, runner/daemon/fastclient.c) must
still be in the socket for the worker, not lost in the server's buffer."""

from __future__ import annotations

import socket

from runner.daemon import protocol


def test_what_follows_the_first_frame_stays_in_the_socket() -> None:
    client, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with client, server:
        request = protocol.encode(protocol.StatusQuery(version=protocol.VERSION))
        interrupt = protocol.encode(protocol.Interrupt())
        client.sendall(request + interrupt)  # one write: both frames wait in the socket together
        reader = protocol.FrameReader()
        assert protocol.receive(server, reader) == request[4:]
        server.setblocking(False)
        assert server.recv(65536) == interrupt  # the worker's reader finds it


def test_frames_arrive_whole_when_read_one_at_a_time() -> None:
    client, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with client, server:
        frames = [protocol.encode(protocol.Progress(events=i, drops=0, elapsed_s=i / 4)) for i in range(50)]
        client.sendall(b"".join(frames))
        reader = protocol.FrameReader(max_fds=0)
        assert [protocol.receive(server, reader) for _ in frames] == [f[4:] for f in frames]
