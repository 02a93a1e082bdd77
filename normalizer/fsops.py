"""File-system changes and untraced I/O as v0 `event_<id>` kernel lines.

v0 knows five kinds; every other monitor id is a line of kind `event_<id>`
with only the common fields (`value` a path or null). The mapping
(docs/artifacts.md, "event_<id> lines"):

| id  | operation (successful)                     | value                     |
| --- | ------------------------------------------ | ------------------------- |
| 120 | unlink, unlinkat                           | the path removed          |
| 121 | rmdir, unlinkat(AT_REMOVEDIR)              | the directory removed     |
| 122 | rename*: source                            | old path                  |
| 123 | rename*: destination (right after its 122) | new path                  |
| 124 | mkdir, mkdirat                             | the directory made        |
| 125 | symlink*: the link made                    | link path                 |
| 126 | symlink*: its target (right after its 125) | target text, as written   |
| 127 | link*: existing file                       | old path                  |
| 128 | link*: new name (right after its 127)      | new path                  |
| 129 | truncate (by path)                         | the path                  |
| 130 | chmod, fchmod, fchmodat, fchmodat2         | the path                  |
| 131 | the same, setting setuid or setgid         | the path                  |
| 132 | mknod, mknodat (file, fifo, socket, device) | the path                 |
| 140 | io_uring_setup (its operations are unseen) | null                      |
| 141 | open_by_handle_at (no path exists)         | the kernel's path, else null |

A failed attempt is the same id plus 100 (220-241), so an attempt is never
read as a change. Two-path operations are two lines, source first, so their
pairs stay adjacent in a thread's order (`rename_pairs`). None of these enter
the capability surface: upstream's surface takes filesystem paths from
`openat`/`file_blocked` lines only.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ebpf.wire import (
    HOOK_CHMOD,
    HOOK_IO_URING,
    HOOK_LINK,
    HOOK_MKDIR,
    HOOK_MKNOD,
    HOOK_OPEN_BY_HANDLE,
    HOOK_RENAME,
    HOOK_SYMLINK,
    HOOK_TRUNCATE,
    HOOK_UNLINK,
)
from normalizer.classify import Classified, kind_name
from normalizer.paths import Resolved

UNLINK, RMDIR, RENAME_FROM, RENAME_TO, MKDIR = 120, 121, 122, 123, 124
SYMLINK, SYMLINK_TARGET, LINK_FROM, LINK_TO, TRUNCATE = 125, 126, 127, 128, 129
CHMOD, CHMOD_SETID, MKNOD = 130, 131, 132
IO_URING_SETUP, OPEN_BY_HANDLE = 140, 141
FAILED = 100
"""Added to an operation's id when the syscall failed."""

AT_REMOVEDIR = 0x200
SETID_BITS = 0o6000
FS_HOOKS = frozenset({HOOK_UNLINK, HOOK_RENAME, HOOK_MKDIR, HOOK_MKNOD, HOOK_SYMLINK, HOOK_LINK,
                      HOOK_TRUNCATE, HOOK_CHMOD, HOOK_IO_URING, HOOK_OPEN_BY_HANDLE})
_SOURCES = {
    HOOK_UNLINK: (UNLINK, RMDIR), HOOK_RENAME: (RENAME_FROM, RENAME_TO), HOOK_MKDIR: (MKDIR,),
    HOOK_SYMLINK: (SYMLINK, SYMLINK_TARGET), HOOK_LINK: (LINK_FROM, LINK_TO),
    HOOK_TRUNCATE: (TRUNCATE,), HOOK_CHMOD: (CHMOD, CHMOD_SETID), HOOK_MKNOD: (MKNOD,),
    HOOK_IO_URING: (IO_URING_SETUP,), HOOK_OPEN_BY_HANDLE: (OPEN_BY_HANDLE,),
}
EVENT_HOOKS = {event + failed: hook for hook, events in _SOURCES.items()
               for event in events for failed in (0, FAILED)}
"""Event id -> the raw hook whose record it comes from (for cross-checks against the spool)."""
UNTRACED_IO_HOOKS = frozenset({HOOK_IO_URING, HOOK_OPEN_BY_HANDLE})
"""Hooks that only say an untraced I/O path was set up (health notes them)."""


def _lines(r: Resolved) -> list[tuple[int, str | None]]:
    e = r.item.event
    hook = e.hook
    if hook == HOOK_UNLINK:
        return [(RMDIR if e.a1 & AT_REMOVEDIR else UNLINK, r.path)]
    if hook == HOOK_RENAME:
        return [(RENAME_FROM, r.path), (RENAME_TO, r.path2)]
    if hook == HOOK_SYMLINK:
        return [(SYMLINK, r.path), (SYMLINK_TARGET, r.path2)]
    if hook == HOOK_LINK:
        return [(LINK_FROM, r.path), (LINK_TO, r.path2)]
    if hook == HOOK_MKDIR:
        return [(MKDIR, r.path)]
    if hook == HOOK_MKNOD:
        return [(MKNOD, r.path)]
    if hook == HOOK_TRUNCATE:
        return [(TRUNCATE, r.path)]
    if hook == HOOK_CHMOD:
        return [(CHMOD_SETID if e.a1 & SETID_BITS else CHMOD, r.path)]
    if hook == HOOK_IO_URING:
        return [(IO_URING_SETUP, None)]
    return [(OPEN_BY_HANDLE, r.path)]  # the kernel's path of the file, where it gave one


def fs_events(r: Resolved, order: int) -> Iterator[Classified]:
    """The kernel lines of one file-system or untraced-I/O record (FS_HOOKS)."""
    e = r.item.event
    offset = FAILED if e.ret < 0 else 0
    for event_type, value in _lines(r):
        event_type += offset
        yield Classified(event_type=event_type, kind=kind_name(event_type), value=value,
                         meta=None, order=order, ts=e.ts)


def rename_pairs(lines: list[tuple[int, int, str | None]]) -> list[tuple[int, str | None, str | None]]:
    """(pid, old, new) of every successful rename, from (pid, event_type, value) in layer order."""
    out = []
    for (pid, kind, old), (pid2, kind2, new) in itertools.pairwise(lines):
        if kind == RENAME_FROM and kind2 == RENAME_TO and pid == pid2:
            out.append((pid, old, new))
    return out
