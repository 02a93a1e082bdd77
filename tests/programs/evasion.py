"""One hiding technique per subcommand, done in DIR (tests/test_evasion_*_kernel.py).

Usage: evasion.py TECHNIQUE DIR
Each technique does its trick and then the reads and writes it would hide; an
attempt the kernel refuses (an unprivileged mount, say) is swallowed: the
attempt itself is what the archive must show. Mount changes stay inside DIR
or a private mount namespace and are undone.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import signal
import socket
import stat
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
SYS_OPENAT2, SYS_SETNS, SYS_EXECVE = 437, 308, 59
SYS_SETXATTRAT, SYS_REMOVEXATTRAT = 463, 466
SYS_PIVOT_ROOT, SYS_OPEN_TREE, SYS_MOVE_MOUNT = 155, 428, 429
SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 430, 431, 432
OPEN_TREE_CLONE, MOVE_MOUNT_F_EMPTY_PATH, FSCONFIG_CMD_CREATE = 1, 4, 6
AT_FDCWD = -100


def _c(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int) -> int:
    return libc.mount(_c(source), _c(target), _c(fstype), flags, None)


def touch_files(d: str, sub: str) -> None:
    """Read a secret and write notes under d/sub (the paths the archive shows)."""
    with contextlib.suppress(OSError), open(f"{d}/{sub}/secret.txt") as f:
        f.read()
    with contextlib.suppress(OSError), open(f"{d}/{sub}/notes.txt", "w") as f:
        f.write("hidden")


def private_namespace(d: str) -> None:
    """d/home (with a secret), d/doc; a private mount namespace (a user namespace too when
    unprivileged) from which nothing propagates back to the host."""
    os.makedirs(f"{d}/home", exist_ok=True)
    os.makedirs(f"{d}/doc", exist_ok=True)
    with open(f"{d}/home/secret.txt", "w") as f:
        f.write("s3cret")
    flags = CLONE_NEWNS if os.geteuid() == 0 else CLONE_NEWNS | CLONE_NEWUSER
    if libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    if mount(None, "/", None, MS_REC | MS_PRIVATE) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")


def _check(ret: int, what: str) -> int:
    if ret < 0:
        raise OSError(ctypes.get_errno(), what)
    return ret


def unshare_bind(d: str) -> None:
    """d/home bound over d/doc in a private mount namespace, then doc/ used."""
    private_namespace(d)
    if mount(f"{d}/home", f"{d}/doc", None, MS_BIND) != 0:
        raise OSError(ctypes.get_errno(), "mount --bind")
    touch_files(d, "doc")


def new_mount_api(d: str) -> None:
    """The same alias with open_tree + move_mount, and a tmpfs made with fsopen/fsmount."""
    private_namespace(d)
    tree = _check(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, f"{d}/home".encode(), OPEN_TREE_CLONE), "open_tree")
    _check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, f"{d}/doc".encode(), MOVE_MOUNT_F_EMPTY_PATH),
           "move_mount")
    os.makedirs(f"{d}/mnt", exist_ok=True)
    fs = _check(libc.syscall(SYS_FSOPEN, b"tmpfs", 0), "fsopen")
    _check(libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0), "fsconfig")
    mnt = _check(libc.syscall(SYS_FSMOUNT, fs, 0, 0), "fsmount")
    _check(libc.syscall(SYS_MOVE_MOUNT, mnt, b"", AT_FDCWD, f"{d}/mnt".encode(), MOVE_MOUNT_F_EMPTY_PATH),
           "move_mount")
    touch_files(d, "doc")


def pivot_root(d: str) -> None:
    """A child pivots its root to d/home (bound on itself) in a private namespace, then writes."""
    pid = os.fork()
    if pid == 0:
        private_namespace(d)
        os.makedirs(f"{d}/home/old", exist_ok=True)
        code = 0
        try:
            if mount(f"{d}/home", f"{d}/home", None, MS_BIND) != 0:
                raise OSError(ctypes.get_errno(), "bind")
            _check(libc.syscall(SYS_PIVOT_ROOT, f"{d}/home".encode(), f"{d}/home/old".encode()), "pivot_root")
            os.chdir("/")
            touch_files("", ".")
        except OSError:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status:
        raise RuntimeError(f"pivot_root child: {status:#x}")


def setns(d: str) -> None:
    """setns into a mount namespace (this one's: the call is what counts), then file access."""
    fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    libc.syscall(SYS_SETNS, fd, CLONE_NEWNS)
    os.close(fd)
    touch_files(d, ".")


def mount_tmpfs(d: str) -> None:
    """A tmpfs over d/mnt in the host's namespace (refused unless root), used, then unmounted."""
    os.makedirs(f"{d}/mnt", exist_ok=True)
    if mount("evasion", f"{d}/mnt", "tmpfs", 0) == 0:
        touch_files(d, "mnt")
        if libc.umount2(f"{d}/mnt".encode(), 0) != 0:
            raise OSError(ctypes.get_errno(), "umount2")


def chroot(d: str) -> None:
    """A child chroots into d/jail (refused unless root) and writes /notes.txt there."""
    os.makedirs(f"{d}/jail", exist_ok=True)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.chroot(f"{d}/jail")
            os.chdir("/")
            touch_files("", ".")
        except OSError:
            code = 3
        os._exit(code)
    os.waitpid(pid, 0)


def chown(d: str) -> None:
    """chown, lchown, fchownat and fchown to the caller's own ids (allowed for everyone)."""
    path = f"{d}/owned"
    with open(path, "w") as f:
        f.write("x")
    uid, gid = os.getuid(), os.getgid()
    os.chown(path, uid, gid)
    os.lchown(path, uid, gid)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.chown("owned", uid, gid, dir_fd=dfd, follow_symlinks=False)
    os.close(dfd)
    fd = os.open(path, os.O_RDONLY)
    os.fchown(fd, uid, gid)
    os.close(fd)


def utimes(d: str) -> None:
    """Times set to now, then backdated to 1999 (utimensat), by path and by fd."""
    path = f"{d}/dated"
    with open(path, "w") as f:
        f.write("x")
    os.utime(path)
    os.utime(path, (917_000_000, 917_000_000))
    fd = os.open(path, os.O_RDONLY)
    os.utime(fd, (917_000_000, 917_000_000))
    os.close(fd)


def xattrs(d: str) -> None:
    """A user xattr set by path and by fd, then removed; the name holds a control byte. Then
    setxattrat and removexattrat relative to a dirfd (ENOSYS before Linux 6.13)."""
    path = f"{d}/tagged"
    with open(path, "w") as f:
        f.write("x")
    os.setxattr(path, "user.evil\x01name", b"v")
    fd = os.open(path, os.O_RDONLY)
    os.setxattr(fd, "user.byfd", b"w")
    os.close(fd)
    os.removexattr(path, "user.evil\x01name")
    value = ctypes.create_string_buffer(b"at")
    args = ctypes.create_string_buffer(  # struct xattr_args: value, size, flags
        ctypes.addressof(value).to_bytes(8, "little") + (2).to_bytes(4, "little") + bytes(4))
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    libc.syscall(SYS_SETXATTRAT, dfd, b"tagged", 0, b"user.at", args, 16)
    libc.syscall(SYS_REMOVEXATTRAT, dfd, b"tagged", 0, b"user.at")
    os.close(dfd)


def unix_bind(d: str) -> None:
    """A unix socket bound at d/sock and an abstract one."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(f"{d}/sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(b"\0evasion-abstract")


def mknod(d: str) -> None:
    """A fifo made with mknod."""
    os.mknod(f"{d}/fifo", 0o600 | stat.S_IFIFO)


def memfd_exec(d: str) -> None:
    """/bin/true copied into a memfd named `payload` and run from it (fexecve: execveat(AT_EMPTY_PATH))."""
    del d
    fd = os.memfd_create("payload", 0)
    with open("/bin/true", "rb") as f:
        os.write(fd, f.read())
    pid = os.fork()
    if pid == 0:
        os.execve(fd, ["payload"], {})
    os.waitpid(pid, 0)


def _fresh_page(d: str, content: bytes) -> tuple[mmap.mmap, int]:
    """`content` in a file mapping never touched by this process: its page is not resident
    in the page tables, so a tracepoint's non-faulting read of it fails at syscall enter."""
    path = f"{d}/page.bin"
    with open(path, "wb") as f:
        f.write(content.ljust(mmap.PAGESIZE, b"\0"))
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_PRIVATE, mmap.PROT_READ)
    os.close(fd)
    return m, _address(path)


def _address(path: str) -> int:
    """Where `path` is mapped (ctypes cannot take the address of a read-only mapping)."""
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith(path):
                return int(line.split("-", 1)[0], 16)
    raise RuntimeError(f"{path} is not mapped")


def unread_how(d: str) -> None:
    """openat2 creating d/created for writing, its `how` on a page not yet faulted in."""
    how = (os.O_WRONLY | os.O_CREAT).to_bytes(8, "little") + (0o600).to_bytes(8, "little") + bytes(8)
    m, addr = _fresh_page(d, how)
    fd = libc.syscall(SYS_OPENAT2, AT_FDCWD, f"{d}/created".encode(), ctypes.c_void_p(addr), 24)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "openat2")
    os.close(fd)
    m.close()
    libc.syscall(SYS_OPENAT2, AT_FDCWD, f"{d}/never".encode(), ctypes.c_void_p(8), 24)  # EFAULT


def unread_argv(d: str) -> None:
    """execve with an argv array that runs off its page into unmapped memory (EFAULT)."""
    del d
    page = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(page))
    arg = ctypes.create_string_buffer(b"true")
    ctypes.memmove(base + mmap.PAGESIZE - 8, ctypes.byref(ctypes.c_void_p(ctypes.addressof(arg))), 8)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(ctypes.c_void_p(base + mmap.PAGESIZE), mmap.PAGESIZE, 0) != 0:  # argv[1]: no access
        raise OSError(ctypes.get_errno(), "mprotect")
    libc.syscall(SYS_EXECVE, b"/bin/true", ctypes.c_void_p(base + mmap.PAGESIZE - 8), None)


def unread_msghdr(d: str) -> None:
    """sendmsg to a unix datagram peer, its msghdr on a page not yet faulted in; then one whose
    msghdr pointer is bad."""
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    peer.bind(f"{d}/peer")
    name = ctypes.create_string_buffer(b"\x01\x00" + f"{d}/peer".encode() + b"\0")
    data = ctypes.create_string_buffer(b"ping")
    iov = (ctypes.c_void_p * 2)(ctypes.addressof(data), 4)
    msghdr = (ctypes.addressof(name).to_bytes(8, "little") + (len(name)).to_bytes(4, "little") + bytes(4)
              + ctypes.addressof(iov).to_bytes(8, "little") + (1).to_bytes(8, "little") + bytes(24))
    m, addr = _fresh_page(d, msghdr)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        sent = libc.sendmsg(s.fileno(), ctypes.c_void_p(addr), 0)
        if sent != 4:
            raise OSError(ctypes.get_errno(), "sendmsg")
        libc.sendmsg(s.fileno(), ctypes.c_void_p(8), 0)  # EFAULT: no header at all
    m.close()
    peer.close()


def _fifo_with_signal(d: str, restart: bool) -> int:
    """Open d/fifo for reading (it blocks); a child signals us, then opens the writing end.
    libc's open, not Python's (which retries EINTR itself). Returns open's result."""
    os.mkfifo(f"{d}/fifo")
    signal.signal(signal.SIGUSR1, lambda *_: None)
    signal.siginterrupt(signal.SIGUSR1, not restart)
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        time.sleep(0.3)
        os.kill(parent, signal.SIGUSR1)
        time.sleep(0.3)
        with contextlib.suppress(OSError):
            os.close(os.open(f"{d}/fifo", os.O_WRONLY | os.O_NONBLOCK))
        os._exit(0)
    fd = libc.open(f"{d}/fifo".encode(), os.O_RDONLY)
    if fd >= 0:
        os.close(fd)
    os.waitpid(child, 0)
    return fd


def interrupted_restarted(d: str) -> None:
    """A blocking FIFO open interrupted by a signal with SA_RESTART: the kernel restarts it."""
    if _fifo_with_signal(d, restart=True) < 0:
        raise OSError(ctypes.get_errno(), "open fifo")


def interrupted_eintr(d: str) -> None:
    """The same without SA_RESTART: open fails with EINTR and is not tried again."""
    if _fifo_with_signal(d, restart=False) >= 0:
        raise RuntimeError("the open was not interrupted")
    touch_files(d, ".")


TECHNIQUES = {f.__name__: f for f in (
    unshare_bind, new_mount_api, pivot_root, setns, mount_tmpfs, chroot, chown, utimes, xattrs, unix_bind,
    mknod, memfd_exec,
    unread_how, unread_argv, unread_msghdr, interrupted_restarted, interrupted_eintr)}

if __name__ == "__main__":
    TECHNIQUES[sys.argv[1]](sys.argv[2])
