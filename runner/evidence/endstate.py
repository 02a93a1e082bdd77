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

Stat caches (`STAT_CACHES`) are compared by type and mode only: their
content is, by design, a record of other files' times and inode numbers
(git's index caches each tracked file's ctime, mtime, device and inode to
tell a changed file from an unchanged one), so it differs every run of any
job that runs `git add`. The report lists every path whose content was not
compared, so nothing is left out silently.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePosixPath

from normalizer.text import escape_os

STAT_CACHES = (".git/index",)
"""Path endings (whole components) of files whose content records other files' times."""
STAT_CACHE_ENTRY = "content not compared (stat cache)"


def is_stat_cache(relative: str) -> bool:
    """Whether a workdir path is a stat cache (see STAT_CACHES)."""
    parts = PurePosixPath(relative).parts
    return any(parts[-len(PurePosixPath(c).parts):] == PurePosixPath(c).parts for c in STAT_CACHES)


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
                content = STAT_CACHE_ENTRY if is_stat_cache(relative) \
                    else _digest(entry.path)
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
