"""Ways around a sandbox, each tried once; print what each returned.

Usage: escapes.py CGROUP_DIR
Each value is 0 (the kernel let it through) or an errno: io_uring_setup,
unshare(CLONE_NEWUSER), clone(CLONE_NEWUSER) (a raw syscall),
clone3(CLONE_INTO_CGROUP) into CGROUP_DIR, and a
write of this process into CGROUP_DIR's `cgroup.procs`. Then what must keep
working: a thread, a subprocess (posix_spawn/vfork) and a fork.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading

SYS_IO_URING_SETUP, SYS_UNSHARE, SYS_CLONE, SYS_CLONE3 = 425, 272, 56, 435
CLONE_NEWUSER = 0x10000000
CLONE_INTO_CGROUP = 0x200000000
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


def raw(*args: object) -> int:
    """0, or the errno of a raw syscall; a child it created exits at once."""
    ret = libc.syscall(*args)
    if ret == 0 and args[0] in (SYS_CLONE, SYS_CLONE3):
        os._exit(0)  # the child
    if ret > 0 and args[0] in (SYS_CLONE, SYS_CLONE3):
        os.waitpid(ret, 0)
    elif ret > 0:
        os.close(ret)
    return ctypes.get_errno() if ret < 0 else 0


def in_a_new_process(fn) -> int:
    """Run fn in a fork (unshare changes the caller) and return what it returned."""
    pid = os.fork()
    if pid == 0:
        os._exit(fn())
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def write_procs(cgroup_dir: str) -> int | None:
    try:
        with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as procs:
            procs.write(f"{os.getpid()}\n")
    except OSError as exc:
        return exc.errno
    return 0


def thread_runs() -> bool:
    seen = []
    t = threading.Thread(target=lambda: seen.append(1))
    t.start()
    t.join()
    return seen == [1]


ARGS_SIZE = ctypes.c_size_t(ctypes.sizeof(CloneArgs))
cgroup_dir = sys.argv[1]
params = ctypes.create_string_buffer(120)
fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
clone_args = CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=fd)
out = {
    "io_uring_setup": raw(SYS_IO_URING_SETUP, 8, params),
    "unshare_newuser": in_a_new_process(lambda: raw(SYS_UNSHARE, CLONE_NEWUSER)),
    "clone_newuser": raw(SYS_CLONE, CLONE_NEWUSER | signal.SIGCHLD, None, None, None, None),
    "clone3_into_cgroup": raw(SYS_CLONE3, ctypes.byref(clone_args), ARGS_SIZE),
    "cgroup_procs_write": in_a_new_process(lambda: write_procs(cgroup_dir)),
    "thread": thread_runs(),
    "subprocess": subprocess.run(["/bin/true"]).returncode,
    "fork": in_a_new_process(lambda: 0),
}
print(json.dumps(out, sort_keys=True))
