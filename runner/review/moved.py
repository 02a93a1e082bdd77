"""Which processes of a run report paths that may not be host paths.

A process that changed its mount namespace or root, or changed the mount
table, names files as it sees them: `/usr/share/doc/x` may be a file bind
mounted from anywhere. `show` and the report mark such processes, and their
descendants, so a reviewer does not take those paths at their word
(normalizer/nsops.py counts the same lines for health).
"""

from __future__ import annotations

from collections.abc import Iterable

from normalizer.artifacts import KernelEvent

MOVING_LINES = frozenset({161, 163, 165, 166, 168, 170})
"""Successful setns, mount, umount2, pivot_root, chroot, move_mount lines (normalizer/nsops.py);
unshare (160) and clone (162) move a process only with CLONE_NEWNS."""


def moved_processes(kernel: Iterable[KernelEvent], children: dict[int, list[int]]) -> set[int]:
    """Processes whose paths may not be host paths: those whose lines changed their mount view or
    the mount table, their descendants, and the children of a clone with CLONE_NEWNS."""
    roots: set[int] = set()
    for e in kernel:
        newns = e.event_type in (160, 162) and "CLONE_NEWNS" in (e.value or "").split("|")
        if e.event_type in MOVING_LINES or (newns and e.event_type == 160):
            roots.add(e.pid)
        elif newns:
            roots.update(children.get(e.pid, ()))
    moved: set[int] = set()
    while roots:
        pid = roots.pop()
        if pid not in moved:
            moved.add(pid)
            roots.update(children.get(pid, ()))
    return moved
