"""Every file-system change the runner once left unobserved, done once each, in DIR.

Usage: fs_ops.py DIR
Plain and dirfd-relative forms, a fifo made with mknod, a setuid and a setgid chmod (also by fd),
failed attempts, a failed exec, io_uring_setup and open_by_handle_at.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys

SYS_RENAMEAT2, SYS_IO_URING_SETUP = 316, 425
SYS_NAME_TO_HANDLE_AT, SYS_OPEN_BY_HANDLE_AT = 303, 304
RENAME_NOREPLACE = 1
AT_FDCWD = -100
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def main() -> None:
    d = sys.argv[1]
    os.mkdir(f"{d}/dir")
    with open(f"{d}/f", "w") as f:
        f.write("data")
    os.rename(f"{d}/f", f"{d}/g")
    os.link(f"{d}/g", f"{d}/h")
    os.symlink("g", f"{d}/s")
    os.truncate(f"{d}/g", 1)
    os.chmod(f"{d}/g", 0o644)
    os.chmod(f"{d}/g", 0o4755)
    fd = os.open(f"{d}/g", os.O_RDONLY)
    os.fchmod(fd, 0o2755)
    os.close(fd)
    os.mknod(f"{d}/fifo", 0o600 | stat.S_IFIFO)
    os.unlink(f"{d}/h")
    os.rmdir(f"{d}/dir")
    for attempt in (lambda: os.unlink(f"{d}/missing"), lambda: os.rename(f"{d}/missing", f"{d}/x"),
                    lambda: os.mkdir(f"{d}/g"), lambda: os.execv(f"{d}/not-a-program", ["x"])):
        with contextlib.suppress(OSError):
            attempt()

    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.mkdir("sub", dir_fd=dfd)
    os.rename("g", "g2", src_dir_fd=dfd, dst_dir_fd=dfd)
    os.symlink("g2", "s2", dir_fd=dfd)
    os.link("g2", "h2", src_dir_fd=dfd, dst_dir_fd=dfd)
    os.unlink("h2", dir_fd=dfd)
    os.rmdir("sub", dir_fd=dfd)
    os.chmod("g2", 0o600, dir_fd=dfd)
    if libc.syscall(SYS_RENAMEAT2, dfd, b"g2", dfd, b"g3", RENAME_NOREPLACE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")

    params = ctypes.create_string_buffer(120)
    ring = libc.syscall(SYS_IO_URING_SETUP, 4, params)
    if ring >= 0:
        os.close(ring)
    handle = ctypes.create_string_buffer(8 + 128)
    ctypes.c_uint.from_buffer(handle).value = 128
    mount_id = ctypes.c_int()
    if libc.syscall(SYS_NAME_TO_HANDLE_AT, AT_FDCWD, f"{d}/g3".encode(), handle,
                    ctypes.byref(mount_id), 0) == 0:
        opened = libc.syscall(SYS_OPEN_BY_HANDLE_AT, dfd, handle, os.O_RDONLY)
        if opened >= 0:
            os.close(opened)


if __name__ == "__main__":
    main()
