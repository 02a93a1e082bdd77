"""What a daemon run's policy variables mean: the operator's and the kernel's data, never the caller's word.

The floor policy is the operator's, so what its variables expand to must not
be the caller's to choose:

- `$WORKSPACE` is the directory the caller's working-directory descriptor
  is, by the kernel's name for it (`/proc/self/fd/N`: no symlink, no `..`),
  and only when it lies under one of `floor.workspace_roots` (globs, one
  `*` per path component at most as fnmatch allows). `cd /` before `run`
  is refused, not turned into a floor that allows writing `/`.
- `$HOME` is the command user's home from the password database.
- `$TMPDIR` is a directory the daemon makes for the run
  (`RUN_TMP/<caller uid>/<run id>`, owned by the command's user, 0700),
  set as the command's `TMPDIR` too; the caller's `TMPDIR` is ignored.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import pwd
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from runner.capture.spawn import Credentials
from runner.errors import RunnerError

RUN_TMP = Path("/var/lib/assay-runner/tmp")
"""Root-owned; each caller gets a root-owned 0711 directory in it, each run its own 0700 one there."""


def matches_root(path: str, root: str) -> bool:
    """Does the absolute `path` lie at or under a directory matching the glob `root`?"""
    parts, globs = PurePosixPath(path).parts, PurePosixPath(root).parts
    return len(parts) >= len(globs) and all(map(fnmatch.fnmatchcase, parts[:len(globs)], globs))


def workspace(cwd_fd: int, roots: tuple[str, ...]) -> Path:
    """The working directory the caller passed, by the kernel's name; RunnerError when it is not
    under a workspace root (`roots` empty: any directory)."""
    name = os.readlink(f"/proc/self/fd/{cwd_fd}")
    try:
        by_name = os.stat(name)
    except OSError:
        by_name = None
    by_fd = os.fstat(cwd_fd)
    if not stat.S_ISDIR(by_fd.st_mode):
        raise RunnerError("the working-directory descriptor is not a directory")
    if by_name is None or (by_name.st_dev, by_name.st_ino) != (by_fd.st_dev, by_fd.st_ino):
        raise RunnerError("the working directory is not reachable by its own name (removed, or in another "
                          "mount namespace); run from a directory that exists on this host")
    if roots and not any(matches_root(name, root) for root in roots):
        raise RunnerError(f"the working directory {name} is not under a workspace root the operator "
                          f"allows (floor.workspace_roots: {', '.join(roots)}); cd into your workspace and "
                          "run again")
    return Path(name)


def home(uid: int) -> str:
    """The user's home from the password database (`/` when the user has none there)."""
    with contextlib.suppress(KeyError):
        return pwd.getpwuid(uid).pw_dir or "/"
    return "/"


def _root_dir(path: Path, mode: int) -> None:
    """`path` as a root-owned directory of `mode`, not a symlink (only root can write its parent)."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=mode)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        raise RunnerError(f"{path} is not a root-owned directory: remove it so the daemon can make it")
    os.chmod(path, mode)


def run_tmp_path(caller_uid: int, run_id: str, root: Path = RUN_TMP) -> Path:
    return root / str(caller_uid) / run_id


@contextlib.contextmanager
def run_tmpdir(caller_uid: int, run_id: str, creds: Credentials, root: Path = RUN_TMP) -> Iterator[Path]:
    """The run's own TMPDIR, empty at the start, owned by `creds`, removed afterwards."""
    root.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    mode = root.parent.stat().st_mode
    if mode & 0o011 != 0o011:  # made under a strict umask (UMask=0077): the command must pass through
        os.chmod(root.parent, stat.S_IMODE(mode) | 0o011)
    _root_dir(root, 0o711)
    _root_dir(root / str(caller_uid), 0o711)
    path = run_tmp_path(caller_uid, run_id, root)
    remove_run_tmp(path)  # a killed worker's, of the same run id
    path.mkdir(mode=0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchown(fd, creds.uid, creds.gid)
    finally:
        os.close(fd)
    try:
        yield path
    finally:
        remove_run_tmp(path)


def remove_run_tmp(path: Path) -> None:
    """Remove a run's TMPDIR; its content is the command's, so symlinks in it are never followed."""
    assert shutil.rmtree.avoids_symlink_attacks
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
