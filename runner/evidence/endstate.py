"""The workdir's end state after a run: what `determinism` compares besides the archives.

Why: the v0 members record which files a job opened, made, renamed and
removed, never what it wrote into them. A job that writes the time into a
file it keeps (`date > stamp.txt`, a build embedding `__DATE__`) gives
byte-identical archives, yet its output differs every run. `determinism`
restores the workdir before every run, so after each run the workdir holds
exactly what that run left there; comparing those end states across runs
catches a content difference, and names the file (docs/determinism.md,
"Workdir end state").

An entry per path below the workdir (relative, in v0 text): its type, its
permission bits, and for a regular file the sha256 of its content, for a
symlink its target. Times, owners and inode numbers are left out: they
differ every run by nature, and the archives already say who made what.

Caches whose content records times (`TIME_RECORDS`) are compared by type
and mode only: their content is, by design, a record of when something
happened, so it differs every run of any job that uses them. git's index
caches each tracked file's ctime, mtime, device and inode (to tell a changed
file from an unchanged one); npm's cache index (cacache `index-v5`) stamps
every entry with the time it was written. The objects they index are
compared. The report lists every path whose content was not compared, so
nothing is left out silently.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from normalizer.text import escape_os

TIME_RECORDS = {
    "git index": re.compile(r"(?:.*/)?\.git/index"),
    "npm cache index": re.compile(r"(?:.*/)?_cacache/index-v5/[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]+"),
}
"""Caches whose content records times: name -> the relative paths it covers (whole match)."""
NOT_COMPARED = "content not compared"


def time_record(relative: str) -> str | None:
    """The name of the time-recording cache a workdir path is, or None (see TIME_RECORDS)."""
    return next((name for name, pattern in TIME_RECORDS.items() if pattern.fullmatch(relative)), None)


def _digest(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def end_state(workdir: Path, excluded: frozenset[Path] = frozenset()) -> dict[str, str]:
    """Every path below `workdir` (but `excluded` trees) -> its entry; symlinks are not followed."""
    state: dict[str, str] = {}

    def walk(directory: str, prefix: str) -> None:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if Path(entry.path) in excluded:
                continue
            relative = f"{prefix}{entry.name}"
            st = entry.stat(follow_symlinks=False)
            mode = f"{stat.S_IMODE(st.st_mode):04o}"
            key = escape_os(relative)
            if stat.S_ISDIR(st.st_mode):
                state[key] = f"dir {mode}"
                walk(entry.path, relative + "/")
            elif stat.S_ISLNK(st.st_mode):
                state[key] = f"symlink -> {escape_os(os.readlink(entry.path))}"
            elif stat.S_ISREG(st.st_mode):
                cache = time_record(relative)
                content = f"{NOT_COMPARED} ({cache})" if cache else _digest(entry.path)
                state[key] = f"file {mode} {content}"
            else:
                state[key] = f"special {mode} {stat.S_IFMT(st.st_mode):o}"

    walk(str(workdir), "")
    return state


def state_digest(state: dict[str, str]) -> str:
    """One digest for a whole end state (entries sorted by path)."""
    h = hashlib.sha256()
    for path in sorted(state):
        h.update(f"{path}\0{state[path]}\n".encode("utf-8", "surrogateescape"))
    return "sha256:" + h.hexdigest()
