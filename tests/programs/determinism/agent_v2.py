"""Version 2: like version 1, plus one extra file read and one extra endpoint."""

import socket

with open("input.txt") as f:
    f.read()
with open("extra.txt") as f:
    f.read()
for port in (9, 10):
    with socket.socket() as s:
        s.connect_ex(("127.0.0.1", port))
