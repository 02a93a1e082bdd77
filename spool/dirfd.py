"""Files made only inside one open directory, never through a path someone else could redirect.

The runner opens `--out` once and creates the spool and the archive through
that directory fd: `O_CREAT|O_EXCL|O_NOFOLLOW` refuses a name that already
exists (a planted symlink included, which is never followed), and renames
stay inside the same directory. Replacing `--out` or any of its parents by a
symlink after it was opened changes nothing the runner writes.
"""

from __future__ import annotations

import contextlib
import os
from typing import BinaryIO

NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_MODE = 0o644
"""Archives: redacted, meant to be read."""
SPOOL_MODE = 0o600
"""Raw spools: not redacted (a header or a token the command used is in there), so for their owner only."""


def open_dir(path: str | os.PathLike[str]) -> int:
    """An fd on the directory `path`; its last component must not be a symlink."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def create_new(dir_fd: int, name: str, mode: int = FILE_MODE) -> BinaryIO:
    """A new file `name` in `dir_fd`, open for writing; FileExistsError if the name is taken."""
    return os.fdopen(create_new_fd(dir_fd, name, mode), "wb")


def create_new_fd(dir_fd: int, name: str, mode: int = FILE_MODE) -> int:
    """`create_new` as a raw fd, for writers that must know exactly which bytes reached the file.

    Created with `mode & 0o600` and then given exactly `mode`, whatever the
    umask: never a moment when a private file is readable by others.
    """
    fd = os.open(name, NEW_FILE, mode & 0o600, dir_fd=dir_fd)
    os.fchmod(fd, mode)
    return fd


def append_to(dir_fd: int, name: str) -> BinaryIO:
    """An existing regular file `name` in `dir_fd`, open for appending (a symlink is refused)."""
    fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    return os.fdopen(fd, "ab")


def rename_within(dir_fd: int, src: str, dst: str) -> None:
    """Atomically rename `src` to `dst` inside `dir_fd` (replacing `dst`)."""
    os.replace(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def remove_within(dir_fd: int, name: str) -> None:
    """Remove `name` from `dir_fd` if it is there (a symlink is removed, never followed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def same_file(fd: int, dir_fd: int, name: str) -> bool:
    """Is `name` in `dir_fd` the very file open as `fd` (not a replacement)?"""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)
