"""Every network shape the monitor decodes: TCP connect over IPv4 and IPv6,
UDP sendto and sendmsg, a unix stream connect and an abstract unix datagram."""

import contextlib
import os
import socket
import sys

tcp4 = socket.socket()
tcp4.connect_ex(("127.0.0.1", 9))
tcp6 = socket.socket(socket.AF_INET6)
tcp6.connect_ex(("::1", 10))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.sendto(b"x", ("127.0.0.1", 5353))
udp.sendmsg([b"y"], [], 0, ("127.0.0.2", 5354))
path = os.path.join(sys.argv[1], "sock")
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
socket.socket(socket.AF_UNIX).connect(path)
with contextlib.suppress(OSError):  # nobody listens: the attempt is still a datagram peer
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"z", "\0abstract-peer")
