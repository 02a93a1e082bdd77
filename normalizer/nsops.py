"""Namespaces, mounts and the rest of the change surface as v0 `event_<id>` kernel lines.

The mapping (docs/artifacts.md, "event_<id> lines"):

| id  | operation (successful)                           | value                          |
| --- | ------------------------------------------------ | ------------------------------ |
| 160 | unshare                                          | its flags' names               |
| 161 | setns                                            | the fd's path, or null         |
| 162 | a task created with CLONE_NEW* (clone, clone3)   | the namespace flags' names     |
| 163 | mount: source                                    | a path (bind, move), else text |
| 164 | mount: target (right after its 163)              | the mount point                |
| 165 | umount2                                          | the mount point                |
| 166 | pivot_root: new root                             | path                           |
| 167 | pivot_root: put old (right after its 166)        | path                           |
| 168 | chroot                                           | path                           |
| 169 | open_tree                                        | path                           |
| 170 | move_mount: from                                 | path (the fd's by fd)          |
| 171 | move_mount: to (right after its 170)             | path                           |
| 172 | fsmount                                          | null                           |
| 173 | chown, lchown, fchownat, fchown                  | the path (fchown: the fd's)    |
| 174 | utimensat, futimesat, utimes, utime: to now      | the path                       |
| 175 | the same with times given (backdating possible)  | the path                       |
| 176 | setxattr, lsetxattr, fsetxattr: the file         | the path (the fd's by fd)      |
| 177 | the same: attribute name (right after its 176)   | the name, as written           |
| 178 | removexattr families: the file                   | the path                       |
| 179 | the same: attribute name (right after its 178)   | the name                       |
| 180 | bind                                             | the address, as connect's      |
| 181 | memfd_create                                     | `memfd:NAME`                   |

A failed attempt is the same id plus 100 (260-281). `NamespaceWatch`
counts what makes the run's paths stop being host paths: a process that
changed its mount namespace or root (unshare/clone/setns with a mount
namespace, chroot, pivot_root: it and the processes it creates afterwards)
and every mount table change (mount, umount2, move_mount: an alias over a
host path, even in the host's own namespace). Health turns
`cgroup_correlation` partial for either (normalizer/health.py): such paths
cannot be mapped back from tracepoint arguments.
"""

from __future__ import annotations

from ebpf.wire import (
    HOOK_BIND,
    HOOK_CHOWN,
    HOOK_CHROOT,
    HOOK_FSMOUNT,
    HOOK_MEMFD,
    HOOK_MOUNT,
    HOOK_MOVE_MOUNT,
    HOOK_OPEN_TREE,
    HOOK_PIVOT_ROOT,
    HOOK_SETNS,
    HOOK_UMOUNT,
    HOOK_UNSHARE,
    HOOK_UTIMES,
    HOOK_XATTR,
)
from normalizer.classify import Classified, endpoint, kind_name
from normalizer.paths import Resolved
from normalizer.tree import Process

UNSHARE, SETNS, CLONE_NS, MOUNT_SOURCE, MOUNT_TARGET, UMOUNT = 160, 161, 162, 163, 164, 165
PIVOT_NEW, PIVOT_OLD, CHROOT, OPEN_TREE, MOVE_FROM, MOVE_TO, FSMOUNT = 166, 167, 168, 169, 170, 171, 172
CHOWN, UTIMES_NOW, UTIMES_GIVEN, XATTR_SET, XATTR_SET_NAME = 173, 174, 175, 176, 177
XATTR_REMOVE, XATTR_REMOVE_NAME, BIND, MEMFD = 178, 179, 180, 181
FAILED = 100

NAMESPACE_FLAGS = (
    ("CLONE_NEWNS", 0x00020000), ("CLONE_NEWCGROUP", 0x02000000), ("CLONE_NEWUTS", 0x04000000),
    ("CLONE_NEWIPC", 0x08000000), ("CLONE_NEWUSER", 0x10000000), ("CLONE_NEWPID", 0x20000000),
    ("CLONE_NEWNET", 0x40000000), ("CLONE_NEWTIME", 0x00000080),
)
CLONE_NEWNS = 0x00020000
NAMESPACE_MASK = sum(bit for _, bit in NAMESPACE_FLAGS)
NS_HOOKS = frozenset({HOOK_UNSHARE, HOOK_SETNS, HOOK_MOUNT, HOOK_UMOUNT, HOOK_PIVOT_ROOT, HOOK_CHROOT,
                      HOOK_OPEN_TREE, HOOK_MOVE_MOUNT, HOOK_FSMOUNT, HOOK_CHOWN, HOOK_UTIMES, HOOK_XATTR,
                      HOOK_BIND, HOOK_MEMFD})
"""Hooks whose records are lines here (task_newtask's are too, when they carry CLONE_NEW*)."""
ROOT_CHANGES = frozenset({HOOK_CHROOT, HOOK_PIVOT_ROOT})
MOUNT_CHANGES = frozenset({HOOK_MOUNT, HOOK_UMOUNT, HOOK_MOVE_MOUNT})
_ONE = {HOOK_UMOUNT: UMOUNT, HOOK_CHROOT: CHROOT, HOOK_OPEN_TREE: OPEN_TREE, HOOK_CHOWN: CHOWN,
        HOOK_MEMFD: MEMFD, HOOK_SETNS: SETNS}
_TWO = {HOOK_MOUNT: (MOUNT_SOURCE, MOUNT_TARGET), HOOK_PIVOT_ROOT: (PIVOT_NEW, PIVOT_OLD),
        HOOK_MOVE_MOUNT: (MOVE_FROM, MOVE_TO)}


def flag_names(flags: int, only_namespaces: bool = False) -> str:
    """`CLONE_NEWNS|CLONE_NEWUSER` for the namespace bits, any other bit as one hex remainder."""
    flags &= 0xFFFFFFFFFFFFFFFF
    names = [name for name, bit in NAMESPACE_FLAGS if flags & bit]
    rest = 0 if only_namespaces else flags & ~NAMESPACE_MASK
    if rest or not names:
        names.append(hex(rest))
    return "|".join(names)


def _lines(r: Resolved) -> list[tuple[int, str | None]]:
    e = r.item.event
    hook = e.hook
    if hook in _ONE:
        return [(_ONE[hook], r.path)]
    if hook in _TWO:
        first, second = _TWO[hook]
        return [(first, r.path), (second, r.path2)]
    if hook == HOOK_UNSHARE:
        return [(UNSHARE, flag_names(e.a0))]
    if hook == HOOK_UTIMES:
        return [(UTIMES_GIVEN if e.a3 else UTIMES_NOW, r.path)]
    if hook == HOOK_XATTR:
        return [(XATTR_REMOVE, r.path), (XATTR_REMOVE_NAME, r.path2)] if e.a1 \
            else [(XATTR_SET, r.path), (XATTR_SET_NAME, r.path2)]
    if hook == HOOK_BIND:
        return [(BIND, endpoint(e.data))]
    return [(FSMOUNT, None)]


class NamespaceWatch:
    """Lines for NS_HOOKS records, and what health needs: which processes stopped seeing host
    paths and how many times the mount table changed."""

    def __init__(self) -> None:
        self.moved: set[Process] = set()
        """Processes whose paths are no longer host paths (own mount namespace or root)."""
        self.mount_changes = 0

    def _moves(self, r: Resolved) -> bool:
        """Did this successful record change its process's mount namespace or root?"""
        e = r.item.event
        if e.hook in ROOT_CHANGES:
            return True
        if e.hook == HOOK_UNSHARE:
            return bool(e.a0 & CLONE_NEWNS)
        # nstype 0: whatever the fd is; a pidfd's flags name every namespace joined
        return e.hook == HOOK_SETNS and (not e.a1 & 0xFFFFFFFF or bool(e.a1 & CLONE_NEWNS))

    def lines(self, r: Resolved, order: int) -> list[Classified]:
        """The kernel lines of one NS_HOOKS record (a failure: +100)."""
        e = r.item.event
        if e.ret >= 0:
            if self._moves(r):
                self.moved.add(r.item.thread.process)
            self.mount_changes += e.hook in MOUNT_CHANGES
        offset = FAILED if e.ret < 0 else 0
        return [Classified(event_type=t + offset, kind=kind_name(t + offset), value=v, meta=None,
                           order=order, ts=e.ts) for t, v in _lines(r)]

    def spawned(self, r: Resolved, order: int) -> list[Classified]:
        """A task_newtask record: a child of a moved process is moved too; CLONE_NEW* is a line."""
        e, child = r.item.event, r.item.spawned
        if child is not None and (r.item.thread.process in self.moved or e.a1 & CLONE_NEWNS):
            self.moved.add(child)
        if not e.a1 & NAMESPACE_MASK:
            return []
        return [Classified(event_type=CLONE_NS, kind=kind_name(CLONE_NS),
                           value=flag_names(e.a1, only_namespaces=True), meta=None, order=order, ts=e.ts)]
