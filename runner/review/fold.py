"""What `show` folds so the first screen answers the reviewer's question.

A shell, `env` or `execvp` looks a command up by trying `execve` on each
PATH entry in turn: every entry before the one that holds the program is a
failed exec (ENOENT, ENOTDIR, EACCES) with the same program name and the
same argv. A pyenv shim chain on a long PATH makes hundreds of them. They
say nothing about what the command could do, so each run of them is folded
into the exec it led to (`after 7 failed PATH lookups`). Likewise a file
that was only ever looked for and not found (every open failed, none
blocked) is counted, not listed; a directory whose files were all opened
the same way (all read, all written) is one line of their names; the
transient names' table and empty sections are left out; a fork that did nothing itself (a subshell) gives
its place to its children. No program run, file read or written, endpoint
or block leaves the text. The data (`show --json`) keeps every one, and
`show --all` lists them unfolded. The HTML report folds the same execs.
"""

from __future__ import annotations

import errno
import posixpath
from dataclasses import dataclass

from runner.review.view import DirectoryGroup, ExecEntry, FileEntry, ProcessEntry, RunView

LOOKUP_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES})


@dataclass(frozen=True)
class ShownExec:
    """An exec as shown, with the failed PATH lookups folded into it."""

    exec: ExecEntry
    lookups_failed: int


def _is_lookup(x: ExecEntry, then: ExecEntry | None) -> bool:
    """A failed exec followed by an exec of the same program name and argv (the next PATH entry's)."""
    return (then is not None and x.result == "error" and x.errno in LOOKUP_ERRNOS
            and x.path is not None and then.path is not None and x.argv == then.argv
            and posixpath.basename(x.path) == posixpath.basename(then.path))


def fold_execs(execs: list[ExecEntry], fold: bool = True) -> list[ShownExec]:
    """A process's execs with each run of PATH lookups folded into the exec after it."""
    out: list[ShownExec] = []
    pending = 0
    for i, x in enumerate(execs):
        if fold and _is_lookup(x, execs[i + 1] if i + 1 < len(execs) else None):
            pending += 1
        else:
            out.append(ShownExec(x, pending))
            pending = 0
    return out


def lookup_text(shown: ShownExec) -> str:
    """The folded part of an exec line, or ''."""
    n = shown.lookups_failed
    return f"  (after {n} failed PATH lookup{'s' if n > 1 else ''})" if n else ""


def silent(proc: ProcessEntry) -> bool:
    """A fork that did nothing of its own (no exec, no event, a clean exit): a shell's subshell. Its
    children are shown in its place."""
    return not proc.execs and proc.events == 0 and proc.exit in (None, "exited 0")


def how(f: FileEntry) -> str:
    """A file's access modes and operation flags, as `show` prints them."""
    return ",".join(f.access_modes + f.operation_flags) or "-"


def uniform(group: DirectoryGroup) -> str | None:
    """The one way every file of the directory was opened (all successful, none blocked, no transient
    name), or None: such a directory is one line of names."""
    ways = {how(f) for f in group.files}
    plain = all(not f.failed and not f.blocked and f.raw_path is None for f in group.files)
    return ways.pop() if plain and len(ways) == 1 else None


def only_looked_for(f: FileEntry) -> bool:
    """Every open of it failed and none was a policy block: the command only found it missing."""
    return f.opens > 0 and f.failed == f.opens and not f.blocked


def fold_files(directories: list[DirectoryGroup]) -> tuple[list[DirectoryGroup], int, int]:
    """The directories with the files only looked for taken out; how many files, in how many directories."""
    kept: list[DirectoryGroup] = []
    missing = dirs = 0
    for group in directories:
        files = [f for f in group.files if not only_looked_for(f)]
        if len(files) < len(group.files):
            missing += len(group.files) - len(files)
            dirs += 1
        if files:
            kept.append(DirectoryGroup(group.directory, files))
    return kept, missing, dirs


@dataclass(frozen=True)
class Capabilities:
    """What the command could be seen doing: the answer a reviewer looks for first."""

    programs: list[str]
    """Programs executed successfully, sorted."""
    written: dict[str, int]
    """Directory -> files opened for writing there (successfully)."""
    read: int
    endpoints: list[str]
    blocks: list[str]


def capabilities(view: RunView) -> Capabilities:
    programs = sorted({x.path for proc in view.processes for x in proc.execs
                       if x.result == "success" and x.path is not None})
    written: dict[str, int] = {}
    for path in view.summary.files_written:
        directory = posixpath.dirname(path) or "."
        written[directory] = written.get(directory, 0) + 1
    read = sum(1 for group in view.directories for f in group.files
               if f.opens > f.failed and set(f.access_modes) & {"read", "read_write"})
    return Capabilities(programs, dict(sorted(written.items())), read,
                        [e.endpoint for e in view.endpoints], [f"{b.kind} {b.target}" for b in view.blocks])
