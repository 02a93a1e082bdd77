"""Reopen attack: write a file through procfs magic links, never naming it for writing.

Usage: proc_reopen.py DIR
O_PATH-open DIR/target, then reopen it for writing through /proc/self/fd/N,
for reading through /proc/thread-self/fd/N, from a child through
/proc/<host pid>/fd/N, read-write through /dev/fd/M of a dup, and finally
try to reopen an fd whose number was closed and reused by a socket.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys


def main() -> None:
    d = sys.argv[1]
    target = f"{d}/target"
    with open(target, "w") as f:
        f.write("x")
    fd = os.open(target, os.O_PATH)
    w = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
    os.write(w, b"y")
    os.close(w)
    os.close(os.open(f"/proc/thread-self/fd/{fd}", os.O_RDONLY))
    host_pid = os.readlink("/proc/self")  # the command sees the host's procfs
    child = os.fork()
    if child == 0:
        os.close(os.open(f"/proc/{host_pid}/fd/{fd}", os.O_WRONLY | os.O_APPEND))
        os._exit(0)
    os.waitpid(child, 0)
    copy = os.dup(fd)
    os.close(os.open(f"/dev/fd/{copy}", os.O_RDWR))
    other = os.open(f"{d}/other", os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(other)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    assert sock.fileno() == other, "the socket must reuse the closed fd's number"
    with contextlib.suppress(OSError):
        os.close(os.open(f"/proc/self/fd/{sock.fileno()}", os.O_RDONLY))


if __name__ == "__main__":
    main()
