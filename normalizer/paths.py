"""Stage 3: resolve relative and dirfd-relative paths to absolute ones.

Each process carries its working directory and a table of the paths its
successful opens returned, keyed by fd. A new process starts from a copy of
its parent's; threads share their process's. `chdir`/`fchdir` move the
working directory; an exec drops the fds opened with O_CLOEXEC.

Without tracing close/dup (too costly on the hot path), an fd entry stays
until another open returns the same number. A dirfd that never came from a
traced open (inherited from outside the run, or made by dup/socket) cannot be
resolved: the event keeps `value: null` and is counted in health notes.
Paths are normalized lexically (`a/./b/../c` -> `a/c`), never by reading the
host filesystem, so normalization stays pure.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from ebpf.wire import HOOK_CHDIR, HOOK_EXEC, HOOK_EXECVE, HOOK_FCHDIR, HOOK_NEWTASK, HOOK_OPEN, TRUNC_FIRST
from normalizer.decode import RawEvent
from normalizer.text import escape_bytes
from normalizer.tree import Attributed, Process

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
O_CLOEXEC = 0o2000000


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


def to_int32(value: int) -> int:
    """Tracepoint ints arrive zero-extended; give them their sign back."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@dataclass
class FsState:
    """A process's working directory and traced fd table."""

    cwd: str | None
    fds: dict[int, tuple[str, bool]] = field(default_factory=dict)

    def copy(self) -> FsState:
        return FsState(self.cwd, dict(self.fds))

    def join(self, base_fd: int, path: str) -> str | None:
        """Absolute form of `path` relative to `base_fd` (or the cwd)."""
        if path.startswith("/"):
            return posixpath.normpath(path).replace("//", "/", 1)
        if base_fd == AT_FDCWD:
            base = self.cwd
        else:
            entry = self.fds.get(base_fd)
            base = entry[0] if entry else None
        if base is None:
            return None
        return posixpath.normpath(posixpath.join(base, path))


@dataclass
class Resolved:
    """An attributed event with its resolved path (None when not a path event)."""

    item: Attributed
    path: str | None


class PathResolver:
    """Tracks per-process filesystem state while walking events in (causal) ring order."""

    def __init__(self, root_cwd: str) -> None:
        self._root_cwd = root_cwd
        self._states: dict[Process, FsState] = {}
        self.unresolved = 0
        self.truncated = 0
        """Path payloads the kernel cut at its capture limit (marked in their values)."""

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
        if e.hook == HOOK_NEWTASK:
            if item.spawned is not None:
                self._states[item.spawned] = state.copy()
            return Resolved(item, None)
        if e.hook == HOOK_FCHDIR:
            entry = state.fds.get(to_int32(e.a0))
            if e.ret == 0:
                state.cwd = entry[0] if entry else None
            return Resolved(item, None)
        if e.hook == HOOK_EXEC:
            state.fds = {fd: v for fd, v in state.fds.items() if not v[1]}
            return Resolved(item, self._join(state, AT_FDCWD, e.data, first_cut(e)))
        if e.hook == HOOK_EXECVE:  # a failed exec: the path it asked for
            dirfd = to_int32(e.a0)
            if e.a1 & AT_EMPTY_PATH and not e.data.split(b"\0", 1)[0]:
                entry = state.fds.get(dirfd)
                return Resolved(item, entry[0] if entry else None)
            return Resolved(item, self._join(state, dirfd, e.data, first_cut(e)))
        if e.hook == HOOK_CHDIR:
            path = self._join(state, AT_FDCWD, e.data, first_cut(e))
            if e.ret == 0:
                state.cwd = path
            return Resolved(item, path)
        if e.hook == HOOK_OPEN:
            path = self._join(state, to_int32(e.a0), e.data, first_cut(e))
            if e.ret >= 0 and path is not None:
                state.fds[e.ret] = (path, bool(e.a1 & O_CLOEXEC))
            return Resolved(item, path)
        return Resolved(item, None)

    def _join(self, state: FsState, base_fd: int, data: bytes, cut: bool = False) -> str | None:
        """`data`'s path against `base_fd`; `cut`: the kernel cut it (the value is marked)."""
        text = c_string(data, cut)
        if text is None:
            return None
        self.truncated += cut
        path = state.join(base_fd, text)
        if path is None:
            self.unresolved += 1
        return path
