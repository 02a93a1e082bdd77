"""What a workspace diff says, read from git's own outputs (pure).

`changed` comes from `git diff --name-status -z` (no quoting, any byte),
`added` from the unified patch: each added line with its patch line number,
file and new-file line number, so a finding can cite the exact line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass(frozen=True)
class Change:
    """One changed path: git status letter (A, M, D, R, C, T) and its path(s)."""

    status: str
    path: str
    old_path: str | None = None

    def paths(self) -> tuple[str, ...]:
        return (self.path,) if self.old_path is None else (self.old_path, self.path)


@dataclass(frozen=True)
class AddedLine:
    """An added line of the patch, where it sits in the patch and in the new file."""

    patch_line: int
    path: str
    line: int
    text: str


@dataclass(frozen=True)
class DiffFacts:
    """The observed workspace change; `available` is False when git could not produce it."""

    available: bool
    changes: tuple[Change, ...] = ()
    added: tuple[AddedLine, ...] = ()
    hash: str = "unknown"
    error: str = ""


def decode_name(raw: bytes) -> str:
    """A path for display: UTF-8 as is, any other byte as `\\xNN` (never raises)."""
    return raw.decode("utf-8", "backslashreplace")


def parse_name_status(raw: bytes) -> tuple[Change, ...]:
    """`git diff --name-status -z` output: STATUS NUL PATH NUL (two paths for R/C)."""
    parts = raw.split(b"\0")
    changes: list[Change] = []
    i = 0
    while i < len(parts) and parts[i]:
        status = parts[i].decode("ascii", "replace")[:1]
        if status in ("R", "C"):
            changes.append(Change(status, decode_name(parts[i + 2]), decode_name(parts[i + 1])))
            i += 3
        else:
            changes.append(Change(status, decode_name(parts[i + 1])))
            i += 2
    return tuple(sorted(changes, key=lambda c: (c.path, c.status)))


def parse_added_lines(patch: bytes) -> tuple[AddedLine, ...]:
    """Added lines of a unified git patch, with file and line numbers."""
    added: list[AddedLine] = []
    path = ""
    new_line = 0
    in_header = False
    for n, raw in enumerate(patch.split(b"\n"), start=1):
        if raw.startswith(b"diff --git "):
            in_header = True
            continue
        if in_header and raw.startswith(b"+++ "):
            target = raw[4:]
            path = decode_name(target[2:] if target.startswith(b"b/") else target)
            continue
        m = _HUNK.match(raw.decode("utf-8", "replace")) if raw.startswith(b"@@") else None
        if m:
            in_header = False
            new_line = int(m.group(1))
            continue
        if in_header:
            continue
        if raw.startswith(b"+"):
            added.append(AddedLine(n, path, new_line, raw[1:].decode("utf-8", "replace")))
            new_line += 1
        elif raw.startswith(b" "):
            new_line += 1
    return tuple(added)
