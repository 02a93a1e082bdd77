"""Recognize a reopen through procfs: `/proc/self/fd/N` and its spellings.

The kernel follows these magic links to the open file itself, so the
path in the syscall says nothing about what was opened: the normalizer
replaces it with the path fd N was opened with (normalizer/paths.py). The
command sees the host's /proc (the runner mounts no procfs of its own), so
`/proc/<pid>` names a host pid; `thread-self`, `task/<tid>` and `/dev/fd`
share the opener's fd table.
"""

from __future__ import annotations

import re

_PROC_FD = re.compile(
    r"^/(?:proc/(self|thread-self|[0-9]+)(?:/task/[0-9]+)?|dev)/fd/([0-9]+)(/.*)?$"
)


PROC_FD_PREFIXES = ("/proc/", "/dev/fd/")
"""Every reopen path starts with one of these."""


def proc_fd_target(path: str) -> tuple[int | None, int, str] | None:
    """(host pid or None for the opener itself, fd, rest of the path) for a reopen, else None."""
    if not path.startswith(PROC_FD_PREFIXES):
        return None
    match = _PROC_FD.match(path)
    if match is None:
        return None
    who, fd, rest = match.groups()
    pid = int(who) if who and who.isdigit() else None
    return pid, int(fd), rest or ""
