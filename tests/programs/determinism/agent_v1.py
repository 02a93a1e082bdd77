"""Version 1 of a tiny 'agent': reads its input, checks one service."""

import socket

with open("input.txt") as f:
    f.read()
for port in (9,):
    with socket.socket() as s:
        s.connect_ex(("127.0.0.1", port))
