"""Resolve procfs magic links in a path: `/proc/self/root`, `.../cwd`, `.../fd/N`, `/dev/fd/N`.

The kernel follows these links to what they name (the process's root or
working directory, the open file itself), so the path in the syscall says
little about what was opened, and a `..` after one climbs from the target,
not from /proc: lexical normalization alone would name the wrong file. A path
that may hold one is walked component by component like the kernel walks it,
each link replaced by its target as `resolve` gives it (normalizer/paths.py
keeps the process and fd state). The command sees the host's /proc (the
runner mounts no procfs of its own), so `/proc/<pid>` names a host pid;
`thread-self`, `task/<tid>`, `/dev/fd` and `/dev/std{in,out,err}` belong to
the opener. A link whose target is unknown (another process outside the run,
an fd of unknown origin) stops the walk: the path is kept as written and the
caller counts it. `/proc/<pid>` of the opener itself becomes `/proc/self`
(and its own thread's `/proc/thread-self`), so what is left with a number
names another process.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

ALIAS_PREFIXES = ("/proc/", "/dev/")
"""Every path holding a magic link (or a pid of the opener) starts with one of these after walking."""

_LINK = re.compile(
    r"proc/(self|thread-self|[0-9]+)(?:/task/[0-9]+)?/(?:(root|cwd)|fd/([0-9]+))"
    r"|dev/(?:fd/([0-9]+)|(stdin|stdout|stderr))"
)
_STD_FDS = {"stdin": 0, "stdout": 1, "stderr": 2}


class Link(NamedTuple):
    """A magic link: whose (`self`, `thread-self`, a host pid; None: the opener), what, which fd."""

    who: str | None
    what: str
    """`root`, `cwd` or `fd`."""
    fd: int = -1


def may_hold_link(lexical: str, base: str | None, data: bytes) -> bool:
    """False only when the path of payload `data` under `base`, `lexical` once normalized, cannot
    hold a link or a pid: one would start the normalized path unless a `..` climbed out of it."""
    return lexical.startswith(ALIAS_PREFIXES) or (b".." in data and (
        b"proc/" in data or b"dev/" in data
        or (base is not None and (base in ("/proc", "/dev") or base.startswith(ALIAS_PREFIXES)))))


def link_of(comps: list[str]) -> Link | None:
    """The magic link that the components walked so far end in, if they do."""
    if not 2 <= len(comps) <= 6 or comps[0] not in ("proc", "dev"):
        return None
    match = _LINK.fullmatch("/".join(comps))
    if match is None:
        return None
    who, what, proc_fd, dev_fd, std = match.groups()
    if what is not None:
        return Link(who, what)
    if proc_fd is not None:
        return Link(who, "fd", int(proc_fd))
    return Link(None, "fd", int(dev_fd) if dev_fd is not None else _STD_FDS[std])


def walk(raw: str, target: Callable[[Link], str | None], tgid: int,
         tid: int) -> tuple[str, Link | None, bool]:
    """(`raw` walked, the link it stopped at or None, whether the answer depended on the opener).

    `raw` is absolute; `target` gives a link's target as an absolute path, or
    None when it is unknown: the walk stops and keeps the rest as written.
    `tgid`/`tid` are the opener's host ids (`/proc/<tgid>` is `/proc/self`).
    """
    parts = [p for p in raw.split("/") if p and p != "."]
    comps: list[str] = []
    opener = False
    for i, part in enumerate(parts):
        if part == "..":
            if comps:
                comps.pop()
            continue
        if len(comps) == 1 and comps[0] == "proc" and part.isdigit() and int(part) in (tgid, tid):
            part = "self" if int(part) == tgid else "thread-self"
            opener = True
        comps.append(part)
        link = link_of(comps)
        if link is None:
            continue
        opener = True
        to = target(link)
        if to is None:
            return "/" + "/".join(comps + parts[i + 1:]), link, opener
        if not to.startswith("/"):  # what an fd stands for without a path (`memfd:NAME`), as it is
            return to + "".join("/" + p for p in parts[i + 1:]), None, opener
        comps = [c for c in to.split("/") if c]
    return "/" + "/".join(comps), None, opener
