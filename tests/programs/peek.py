"""Reach into another process: ptrace attach, then process_vm_readv and process_vm_writev.

Usage: peek.py OUT
Fork a child holding a token in memory, PTRACE_ATTACH to it, read the token
with process_vm_readv, write it back with process_vm_writev, detach and kill
the child. OUT gets "CHILD_PID ATTACH READ WRITE" (each call's result).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

PTRACE_ATTACH, PTRACE_DETACH = 16, 17


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.process_vm_readv.restype = libc.process_vm_writev.restype = ctypes.c_ssize_t
    token = ctypes.create_string_buffer(b"token-in-child-memory", 64)
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    attached = libc.ptrace(PTRACE_ATTACH, child, None, None)
    if attached == 0:
        os.waitpid(child, 0)
    local = ctypes.create_string_buffer(64)
    mine, theirs = Iovec(ctypes.addressof(local), 64), Iovec(ctypes.addressof(token), 64)
    read = libc.process_vm_readv(child, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
    wrote = libc.process_vm_writev(child, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
    libc.ptrace(PTRACE_DETACH, child, None, None)
    os.kill(child, 9)
    os.waitpid(child, 0)
    with open(sys.argv[1], "w") as f:
        f.write(f"{child} {attached} {read} {wrote}\n")


if __name__ == "__main__":
    main()
