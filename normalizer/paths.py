"""Stage 3: resolve relative and dirfd-relative paths to absolute ones.

Each process carries its working directory and a table of the paths its
successful opens returned, keyed by fd. A new process starts from a copy of
its parent's; threads share their process's. `chdir`/`fchdir` move the
working directory; an exec drops the fds opened with O_CLOEXEC; close,
close_range and the dup family (traced for this) keep the table exact, so a
number reused by an untraced fd (a socket, a pipe) never inherits a stale
path. A dirfd whose origin is unknown (inherited from outside the run, made
by an untraced syscall or by open_by_handle_at) cannot be resolved: the event
keeps `value: null` and is counted in health notes.

A path through a procfs magic link resolves to what the link names
(normalizer/reopen.py): `/proc/<who>/root` to `/` (a process's paths are
reported in its own root's terms), `/proc/<who>/cwd` to that process's working
directory, and a reopen through `/proc/<who>/fd/N`, `/dev/fd/N` or
`/dev/std{in,out,err}` to the path fd N was opened with, so it carries the
target with the reopen's own access mode. `<who>` is `self`, `thread-self` or
a host pid of the run (the command sees the host's /proc). A link whose
target is unknown (a process outside the run, an fd of unknown origin) keeps
the path as written, counted for health. An exec of such a path (fexecve:
the kernel names it `/dev/fd/N`) is the fd's path too; a memfd_create fd
stands for `memfd:NAME`, an open_tree fd for its path.
Paths are normalized lexically (`a/./b/../c` -> `a/c`), never by reading the
host filesystem, so normalization stays pure.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import overload

import msgspec

from ebpf.wire import (
    HOOK_CHDIR,
    HOOK_CHMOD,
    HOOK_CHOWN,
    HOOK_CHROOT,
    HOOK_CLOSE,
    HOOK_CLOSE_RANGE,
    HOOK_DUP,
    HOOK_EXEC,
    HOOK_EXECVE,
    HOOK_FCHDIR,
    HOOK_FSMOUNT,
    HOOK_LINK,
    HOOK_MEMFD,
    HOOK_MKDIR,
    HOOK_MKNOD,
    HOOK_MOUNT,
    HOOK_MOVE_MOUNT,
    HOOK_NEWTASK,
    HOOK_OPEN,
    HOOK_OPEN_BY_HANDLE,
    HOOK_OPEN_TREE,
    HOOK_PIVOT_ROOT,
    HOOK_RENAME,
    HOOK_SETNS,
    HOOK_SYMLINK,
    HOOK_TRUNCATE,
    HOOK_UMOUNT,
    HOOK_UNLINK,
    HOOK_UTIMES,
    HOOK_XATTR,
    TRUNC_FIRST,
    TRUNC_SECOND,
)
from normalizer.decode import RawEvent
from normalizer.reopen import Link, may_hold_link, walk
from normalizer.telemetry import is_telemetry_path
from normalizer.text import escape_bytes
from normalizer.tree import Attributed, Process, Thread

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
RESOLVE_IN_ROOT = 0x10
"""openat2 `how.resolve`: resolve the path as if the dirfd were the root directory."""
O_CLOEXEC = 0o2000000
CLOSE_RANGE_CLOEXEC = 4
FD_HOOKS = frozenset({HOOK_CLOSE, HOOK_CLOSE_RANGE, HOOK_DUP})
JOIN_MEMO = 1 << 12
"""Distinct (base, payload) joins remembered at once."""
ONE_PATH_HOOKS = frozenset({HOOK_UNLINK, HOOK_MKDIR, HOOK_MKNOD, HOOK_TRUNCATE, HOOK_CHMOD, HOOK_CHOWN,
                            HOOK_UTIMES, HOOK_UMOUNT, HOOK_CHROOT, HOOK_OPEN_TREE})
MS_BIND, MS_MOVE = 0x1000, 0x2000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
MOUNT_TWO_PATH_HOOKS = frozenset({HOOK_MOUNT, HOOK_PIVOT_ROOT, HOOK_MOVE_MOUNT})
MFD_CLOEXEC = FSMOUNT_CLOEXEC = 1
MEMFD_PREFIX = "memfd:"
"""The path a memfd_create fd stands for in the fd table: `memfd:NAME` (lossless, as any path)."""


def empty_path_is_fd(e: RawEvent) -> bool:
    """Does an empty path of this one-path record name its dirfd itself (AT_EMPTY_PATH,
    fchmod, fchown, utimensat(fd, NULL))?"""
    if e.hook == HOOK_CHMOD:
        return bool(e.a3 == 1 or e.a2 & AT_EMPTY_PATH)
    if e.hook == HOOK_CHOWN:
        return bool(e.a3 & AT_EMPTY_PATH)
    if e.hook == HOOK_OPEN_TREE:
        return bool(e.a1 & AT_EMPTY_PATH)
    return e.hook == HOOK_UTIMES


def c_string(data: bytes, truncated: bool = False) -> str | None:
    """A NUL-terminated payload as v0 text (normalizer/text.py), or None if empty.

    `truncated` (the kernel cut the string at its capture limit) appends the
    truncation marker, so a cut path never passes for a whole one.
    """
    raw = data.split(b"\0", 1)[0]
    return escape_bytes(raw, truncated) if raw else None


def first_cut(e: RawEvent) -> bool:
    """Did the kernel cut the record's (first) path string at its capture limit?"""
    return bool(e.truncated & TRUNC_FIRST)


def second_cut(e: RawEvent) -> bool:
    """Did the kernel cut the second path string of a two-path record?"""
    return bool(e.truncated & TRUNC_SECOND)


def second_string(data: bytes) -> bytes:
    """The payload after its first NUL: the second string of a two-path record."""
    _, _, rest = data.partition(b"\0")
    return rest


def to_int32(value: int) -> int:
    """Tracepoint ints arrive zero-extended; give them their sign back."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@overload
def joined(base: str, path: str) -> str: ...
@overload
def joined(base: str | None, path: str) -> str | None: ...
def joined(base: str | None, path: str) -> str | None:
    """`path` made absolute against `base` (None: unknown), normalized lexically.

    Already-normal absolute paths and plain names under a normal base skip
    posixpath (most opens are one of the two); the result is the same.
    """
    if path.startswith("/"):
        if "//" in path or "/." in path or path.endswith("/"):
            return posixpath.normpath(path).replace("//", "/", 1)
        return path
    if base is None:
        return None
    if "/" not in path and path not in (".", "..") and base.startswith("/") \
            and not ("//" in base or "/." in base or base.endswith("/")):
        return base + "/" + path
    return posixpath.normpath(posixpath.join(base, path))


@dataclass
class FsState:
    """A process's working directory and traced fd table."""

    cwd: str | None
    fds: dict[int, tuple[str | None, bool]] = field(default_factory=dict)
    """fd -> (path it was opened with, or None when unknown; close-on-exec)."""

    def copy(self) -> FsState:
        return FsState(self.cwd, dict(self.fds))

    def join(self, base_fd: int, path: str) -> str | None:
        """Absolute form of `path` relative to `base_fd` (or the cwd)."""
        if path.startswith("/"):
            return joined(None, path)
        if base_fd == AT_FDCWD:
            return joined(self.cwd, path)
        entry = self.fds.get(base_fd)
        return joined(entry[0] if entry else None, path)

    def fd_path(self, fd: int) -> str | None:
        entry = self.fds.get(fd)
        return entry[0] if entry else None

    def on_fd_event(self, hook: int, ret: int, a0: int, a1: int, a2: int) -> None:
        """Keep the table exact across close, close_range, dup and handle opens."""
        if hook == HOOK_CLOSE:
            self.fds.pop(to_int32(a0), None)
        elif hook == HOOK_CLOSE_RANGE:
            first, last = a0 & 0xFFFFFFFF, a1 & 0xFFFFFFFF
            for fd in [fd for fd in self.fds if first <= fd <= last]:
                if a2 & CLOSE_RANGE_CLOEXEC:
                    self.fds[fd] = (self.fds[fd][0], True)
                else:
                    del self.fds[fd]
        elif hook == HOOK_DUP and ret >= 0:
            self.fds[ret] = (self.fd_path(to_int32(a0)), bool(a2 & O_CLOEXEC))


class Resolved(msgspec.Struct, gc=False):
    """An attributed event with its resolved path(s) (None when not a path event).

    A Struct, not a dataclass: one is made per record, and Struct creation is cheaper.

    `path2` is the second path of a two-path syscall (rename/link: the new
    name) or a symlink's target text as written (never resolved).
    """

    item: Attributed
    path: str | None
    path2: str | None = None
    aliased: bool = False
    """An open at or under a telemetry-table path the run made point elsewhere (`aliases`)."""


class PathResolver:
    """Tracks per-process filesystem state while walking events in (causal) ring order."""

    def __init__(self, root_cwd: str, thread_of: Callable[[int], Thread | None] | None = None) -> None:
        self._root_cwd = root_cwd
        self._states: dict[Process, FsState] = {}
        self._thread_of = thread_of or (lambda _tid: None)
        self.unresolved = 0
        self.unresolved_reopens = 0
        """fd reopens (/proc/<who>/fd/N, /dev/fd/N) whose fd has no known path (kept as written)."""
        self.unresolved_aliases = 0
        """/proc/<who>/root and cwd links of a process outside the run or of an unknown cwd."""
        self.truncated = 0
        """Path payloads the kernel cut at its capture limit (marked in their values)."""
        self.reopens = 0
        """Paths whose answer depended on the opener or on another process's state: a magic link
        or a /proc/<pid> of the opener (never memoized by the scan)."""
        self._joined: dict[tuple[str | None, bytes, bool], tuple[bool, str | None]] = {}
        self.aliases: set[str] = set()
        """Paths of the telemetry table the run made name another file: a symlink made there, a
        hard link or a rename onto one (`ln -s ~/.ssh/id_rsa /dev/shm/k`). A read at or under one
        is evidence, not a runtime lookup (normalizer/telemetry.py)."""

    @property
    def states(self) -> dict[Process, FsState]:
        """Each process's state (the same dict for the whole walk, read by the scan's fast path)."""
        return self._states

    def _state(self, proc: Process) -> FsState:
        state = self._states.get(proc)
        if state is None:
            parent = self._states.get(proc.parent) if proc.parent else None
            state = parent.copy() if parent else FsState(self._root_cwd)
            self._states[proc] = state
        return state

    def cwd(self, proc: Process) -> str | None:
        """The working directory `proc` has now (None when it is not known)."""
        return self._state(proc).cwd

    def resolve(self, item: Attributed) -> Resolved:
        """Update state for `item` and return its absolute path, if it has one."""
        e = item.event
        state = self._state(item.thread.process)
        # the hottest hooks first (hooks are disjoint, so the order is only speed)
        if e.hook == HOOK_OPEN:
            if e.a3 & RESOLVE_IN_ROOT:
                path = self._in_root(state, to_int32(e.a0), e.data, first_cut(e))
            else:
                path = self._join(item, state, to_int32(e.a0), e.data, first_cut(e))
            if e.ret >= 0:
                state.fds[e.ret] = (path, bool(e.a1 & O_CLOEXEC))
            if self.aliased(path):
                self.reopens += 1  # its answer depends on the run's links: never memoized
                return Resolved(item, path, aliased=True)
            return Resolved(item, path)
        if e.hook in FD_HOOKS:
            state.on_fd_event(e.hook, e.ret, e.a0, e.a1, e.a2)
            return Resolved(item, None)
        if e.hook == HOOK_OPEN_BY_HANDLE:  # a handle names no path; the kernel's, when it gave one
            path = c_string(e.data)  # (normalizer/kernelpaths.py pairs it in)
            if e.ret >= 0:
                state.fds[e.ret] = (path, bool(e.a1 & O_CLOEXEC))
            return Resolved(item, path)
        if e.hook == HOOK_NEWTASK:
            if item.spawned is not None:
                self._states[item.spawned] = state.copy()
            return Resolved(item, None)
        if e.hook == HOOK_FCHDIR:
            if e.ret == 0:
                state.cwd = state.fd_path(to_int32(e.a0))
            return Resolved(item, None)
        if e.hook == HOOK_EXEC:  # a memfd or any fd exec'd by /dev/fd/N: the fd's path (the walk)
            path = self._join(item, state, AT_FDCWD, e.data, first_cut(e))  # before close-on-exec
            state.fds = {fd: v for fd, v in state.fds.items() if not v[1]}
            return Resolved(item, path)
        if e.hook == HOOK_EXECVE:  # a failed exec: the path it asked for
            by_fd = bool(e.a1 & AT_EMPTY_PATH)
            return Resolved(item, self.path_at(item, to_int32(e.a0), e.data, first_cut(e), by_fd))
        if e.hook == HOOK_CHDIR:
            path = self._join(item, state, AT_FDCWD, e.data, first_cut(e))
            if e.ret == 0:
                state.cwd = path
            return Resolved(item, path)
        if e.hook in ONE_PATH_HOOKS:
            path = self.path_at(item, to_int32(e.a0), e.data, first_cut(e), empty_path_is_fd(e))
            if e.hook == HOOK_OPEN_TREE and e.ret >= 0:
                state.fds[e.ret] = (path, bool(e.a1 & O_CLOEXEC))
            return Resolved(item, path)
        if e.hook in (HOOK_RENAME, HOOK_LINK):
            by_fd = e.hook == HOOK_LINK and bool(e.a2 & AT_EMPTY_PATH)
            old = self.path_at(item, to_int32(e.a0), e.data, first_cut(e), by_fd)
            new = self.path_at(item, to_int32(e.a1), second_string(e.data), second_cut(e))
            self._made_alias(e.ret, new)
            return Resolved(item, old, new)
        if e.hook in MOUNT_TWO_PATH_HOOKS:
            return self._mount_paths(item)
        if e.hook == HOOK_XATTR:  # the path (the fd's by fd); the attribute name as written
            path = self.path_at(item, to_int32(e.a0), e.data, first_cut(e), e.a3 == 1)
            self.truncated += second_cut(e)
            return Resolved(item, path, c_string(second_string(e.data), second_cut(e)))
        if e.hook == HOOK_MEMFD:
            self.truncated += first_cut(e)
            path = MEMFD_PREFIX + (c_string(e.data, first_cut(e)) or "")
            if e.ret >= 0:
                state.fds[e.ret] = (path, bool(e.a0 & MFD_CLOEXEC))
            return Resolved(item, path)
        if e.hook == HOOK_SETNS:
            return Resolved(item, state.fd_path(to_int32(e.a0)))
        if e.hook == HOOK_FSMOUNT and e.ret >= 0:
            state.fds[e.ret] = (None, bool(e.a1 & FSMOUNT_CLOEXEC))  # a new mount: no path yet
        if e.hook == HOOK_SYMLINK:  # the link path; the target text as written
            link = self.path_at(item, to_int32(e.a0), second_string(e.data), second_cut(e))
            self.truncated += first_cut(e)
            self._made_alias(e.ret, link)
            return Resolved(item, link, c_string(e.data, first_cut(e)))
        return Resolved(item, None)

    def _made_alias(self, ret: int, path: str | None) -> None:
        if ret == 0 and path is not None and is_telemetry_path(path):
            self.aliases.add(path)

    def aliased(self, path: str | None) -> bool:
        """Is `path` at or under one of `aliases`?"""
        if not self.aliases:
            return False
        while path and path != "/":
            if path in self.aliases:
                return True
            path = path.rsplit("/", 1)[0]
        return False

    def _mount_paths(self, item: Attributed) -> Resolved:
        """mount (source: a path for a bind or move, else the text as written), pivot_root and
        move_mount (each side by its dirfd, or the dirfd itself with its EMPTY_PATH flag)."""
        e = item.event
        first, second = e.data, second_string(e.data)
        if e.hook == HOOK_MOUNT:
            if e.a0 & (MS_BIND | MS_MOVE):
                source = self.path_at(item, AT_FDCWD, first, first_cut(e))
            else:
                self.truncated += first_cut(e)
                source = c_string(first, first_cut(e))
            return Resolved(item, source, self.path_at(item, AT_FDCWD, second, second_cut(e)))
        if e.hook == HOOK_PIVOT_ROOT:
            return Resolved(item, self.path_at(item, AT_FDCWD, first, first_cut(e)),
                            self.path_at(item, AT_FDCWD, second, second_cut(e)))
        return Resolved(item,
                        self.path_at(item, to_int32(e.a0), first, first_cut(e),
                                     bool(e.a2 & MOVE_MOUNT_F_EMPTY_PATH)),
                        self.path_at(item, to_int32(e.a1), second, second_cut(e),
                                     bool(e.a2 & MOVE_MOUNT_T_EMPTY_PATH)))

    def path_at(self, item: Attributed, dirfd: int, data: bytes, cut: bool,
                empty_path_fd: bool = False) -> str | None:
        """`data`'s path resolved against `dirfd` in `item`'s process (`cut`: marked truncated).

        With `empty_path_fd` (AT_EMPTY_PATH, fchmod) an empty path names the fd itself.
        """
        state = self._state(item.thread.process)
        if empty_path_fd and not data.split(b"\0", 1)[0]:
            return state.fd_path(dirfd)
        return self._join(item, state, dirfd, data, cut)

    def _target(self, opener: Thread, link: Link) -> str | None:
        """What `link` names for `opener`, or None when it is not known."""
        thread = opener if link.who in (None, "self", "thread-self") else self._thread_of(int(link.who or 0))
        if thread is None:
            return None
        if link.what == "root":
            return "/"
        state = self._state(thread.process)
        return state.cwd if link.what == "cwd" else state.fd_path(link.fd)

    def _join(self, item: Attributed, state: FsState, base_fd: int, data: bytes,
              cut: bool = False) -> str | None:
        """`data`'s path against `base_fd` for `item`'s opener; `cut`: the kernel cut it (the value
        is marked).

        The lexical answer depends only on the base directory, the payload and
        `cut`, and agents open the same names again and again, so it is
        memoized on those (the memo is emptied past `JOIN_MEMO` entries: memory
        stays flat). A path that may hold a magic link is walked instead.
        """
        if data[:1] == b"/":
            base = None
        elif base_fd == AT_FDCWD:
            base = state.cwd
        else:
            base = state.fd_path(base_fd)
        key = (base, data, cut)
        hit = self._joined.get(key)
        if hit is None:
            text = c_string(data, cut)
            hit = (text is not None, None if text is None else joined(base, text))
            if len(self._joined) >= JOIN_MEMO:
                self._joined.clear()
            self._joined[key] = hit
        has_text, path = hit
        if has_text:
            self.truncated += cut
            self.unresolved += path is None
            if path is not None and may_hold_link(path, base, data):
                path = self._walked(item, base, data, cut)
        return path

    def _in_root(self, state: FsState, dirfd: int, data: bytes, cut: bool) -> str | None:
        """An openat2 path under RESOLVE_IN_ROOT: `/` and `..` stay inside `dirfd` (or the cwd),
        and the kernel follows no magic link. Its answer depends on the dirfd's path, so the
        scan never memoizes it (counted in `reopens`)."""
        root = state.cwd if dirfd == AT_FDCWD else state.fd_path(dirfd)
        text = c_string(data, cut)
        if text is None:
            return None
        self.reopens += 1
        self.truncated += cut
        if root is None:
            self.unresolved += 1
            return None
        inner = joined("/", "/" + text)  # lexically inside the root: a leading .. stays at /
        return root if inner == "/" else root.rstrip("/") + inner

    def _walked(self, item: Attributed, base: str | None, data: bytes, cut: bool) -> str:
        """The path with its magic links followed (normalizer/reopen.py), counted for health."""
        text = c_string(data, cut) or ""
        raw = text if text.startswith("/") or base is None else base + "/" + text
        e = item.event
        path, stuck, opener = walk(raw, lambda link: self._target(item.thread, link), e.tgid, e.tid)
        self.reopens += opener
        if stuck is not None:
            if stuck.what == "fd":
                self.unresolved_reopens += 1
            else:
                self.unresolved_aliases += 1
        return path
