"""Five ways to open a file under a name that is not its own, in DIR (tests/test_kernel_path_kernel.py).

Usage: kernel_paths.py DIR
DIR holds `secret` (content S), `decoy` (D), `link` (a symlink to secret, made before the run) and
the empty directories `src` and `dst`. In order:

1. /proc/self/root alias: reads DIR/secret as /proc/self/root/DIR/secret;
2. symlink: reads DIR/link;
3. bind mount in a user namespace: writes src/f, then, in `unshare -Urm`, bind-mounts src on dst
   and reads dst/f;
4. io_uring: reads DIR/secret with an IORING_OP_OPENAT (no open syscall);
5. racing thread: one thread opens DIR/secret's name from a buffer while another keeps swapping
   the buffer between `secret` and `decoy`; each open reads the byte of the file it got.

Prints one JSON object: the counts of opens that got secret and decoy in case 5, and how many of
them returned with the buffer naming the other file (the race a user-memory read is fooled by).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import struct
import subprocess
import sys
import threading
import time

SYS_IO_URING_SETUP, SYS_IO_URING_ENTER = 425, 426
IORING_OP_OPENAT = 18
IORING_ENTER_GETEVENTS = 1
IORING_OFF_SQ_RING, IORING_OFF_CQ_RING, IORING_OFF_SQES = 0, 0x8000000, 0x10000000
AT_FDCWD = -100
RACE_SECONDS = 20
RACE_WANTED = 3
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.open.restype = ctypes.c_int
libc.open.argtypes = [ctypes.c_char_p, ctypes.c_int]


def read_one(path: str) -> str:
    with open(path) as f:
        return f.read(1)


def io_uring_open(path: str) -> int:
    """openat(AT_FDCWD, path, O_RDONLY) submitted through an io_uring: the fd, or -errno."""
    params = ctypes.create_string_buffer(120)
    ring = libc.syscall(SYS_IO_URING_SETUP, 4, params)
    if ring < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")
    sq_entries, cq_entries = struct.unpack_from("<II", params, 0)
    _, sq_tail, sq_mask, _, _, _, sq_array = struct.unpack_from("<7I", params, 40)
    cq_head, cq_tail, cq_mask, _, _, cq_cqes = struct.unpack_from("<6I", params, 80)
    sq = mmap.mmap(ring, sq_array + sq_entries * 4, offset=IORING_OFF_SQ_RING)
    cq = mmap.mmap(ring, cq_cqes + cq_entries * 16, offset=IORING_OFF_CQ_RING)
    sqes = mmap.mmap(ring, sq_entries * 64, offset=IORING_OFF_SQES)
    name = ctypes.create_string_buffer(path.encode())
    # opcode, flags, ioprio, fd (dirfd), off, addr (path), len (mode), open_flags, user_data
    struct.pack_into("<BBHiQQIIQ", sqes, 0, IORING_OP_OPENAT, 0, 0, AT_FDCWD, 0,
                     ctypes.addressof(name), 0, os.O_RDONLY, 7)
    tail = struct.unpack_from("<I", sq, sq_tail)[0]
    struct.pack_into("<I", sq, sq_array + (tail & struct.unpack_from("<I", sq, sq_mask)[0]) * 4, 0)
    struct.pack_into("<I", sq, sq_tail, tail + 1)
    if libc.syscall(SYS_IO_URING_ENTER, ring, 1, 1, IORING_ENTER_GETEVENTS, None, 0) < 0:
        raise OSError(ctypes.get_errno(), "io_uring_enter")
    head = struct.unpack_from("<I", cq, cq_head)[0]
    assert head != struct.unpack_from("<I", cq, cq_tail)[0], "no completion"
    _user_data, res, _flags = struct.unpack_from(
        "<QiI", cq, cq_cqes + (head & struct.unpack_from("<I", cq, cq_mask)[0]) * 16)
    struct.pack_into("<I", cq, cq_head, head + 1)
    for m in (sq, cq, sqes):
        m.close()
    os.close(ring)
    return res


def race(d: str) -> dict[str, int]:
    """Open the buffer's name while another thread swaps it; count what each open got."""
    names = [f"{d}/secret".encode(), f"{d}/decoy\0".encode()]  # the same length: a swap is one copy
    buf = ctypes.create_string_buffer(names[0], len(names[0]) + 1)
    stop = threading.Event()

    def swap() -> None:
        i = 0
        while not stop.is_set():
            i ^= 1
            ctypes.memmove(buf, names[i], len(names[i]))

    got = {"S": 0, "D": 0, "fooled": 0}
    swapper = threading.Thread(target=swap)
    swapper.start()
    deadline = time.monotonic() + RACE_SECONDS
    try:
        while got["fooled"] < RACE_WANTED and time.monotonic() < deadline:
            fd = libc.open(buf, os.O_RDONLY)
            named = buf.value
            if fd < 0:
                continue
            content = os.read(fd, 1).decode()
            os.close(fd)
            got[content] += 1
            got["fooled"] += (content == "S") != named.endswith(b"/secret")
    finally:
        stop.set()
        swapper.join()
    return {"secret": got["S"], "decoy": got["D"], "fooled": got["fooled"]}


def main() -> None:
    d = sys.argv[1]
    assert read_one(f"/proc/self/root{d}/secret") == "S"
    assert read_one(f"{d}/link") == "S"
    with open(f"{d}/src/f", "w") as f:
        f.write("B")
    subprocess.run(["unshare", "-Urm", "sh", "-c", f"mount --bind {d}/src {d}/dst && cat {d}/dst/f"],
                   check=True, stdout=subprocess.DEVNULL)
    fd = io_uring_open(f"{d}/secret")
    assert fd >= 0, os.strerror(-fd)
    assert os.read(fd, 1) == b"S"
    os.close(fd)
    print(json.dumps(race(d)))


if __name__ == "__main__":
    main()
