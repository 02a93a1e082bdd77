"""Snapshot a working directory once, and put it back before every run.

Why: a command's first run changes its working directory (build outputs,
logs, bytecode caches), so a second run starting from that state does
different work and the runs differ for a reason that is not the command's.
`determinism` copies the workdir aside before run 1 and restores it at the
SAME path before each run (and once more at the end, so the check leaves no
trace): everything the previous run created is deleted, and contents, modes,
owners and mtimes come back (make decides what to rebuild from mtimes).

The workdir keeps its path and inode; only its contents are replaced. Paths
inside it that must survive (an --out directory under the workdir) are
excluded: neither copied nor deleted. Hard links come back as separate
files; fifos, sockets and devices are refused, since copying them is either
meaningless or would block.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path


class SnapshotError(Exception):
    """The workdir cannot be snapshotted or restored; the message says why."""


def _keep_owner(src_stat: os.stat_result, dst: Path) -> None:
    """Owners matter to a command run as root; only root can restore them."""
    if os.geteuid() == 0:
        os.lchown(dst, src_stat.st_uid, src_stat.st_gid)


def _copy_tree(src: Path, dst: Path, skip: frozenset[Path]) -> None:
    """Copy the contents of directory `src` into directory `dst` (which exists).

    Directory metadata is applied after the directory's contents, so writing
    the entries does not disturb the copied mtimes.
    """
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        source = Path(entry.path)
        if source in skip:
            continue
        target = dst / entry.name
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            target.mkdir(exist_ok=True)
            _copy_tree(source, target, skip)
            shutil.copystat(source, target, follow_symlinks=False)
        elif stat.S_ISREG(st.st_mode):
            shutil.copy2(source, target, follow_symlinks=False)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(source), target)
            shutil.copystat(source, target, follow_symlinks=False)
        else:
            raise SnapshotError(f"{source} is not a regular file, directory or symlink")
        _keep_owner(st, target)


def _clear(directory: Path, keep: frozenset[Path]) -> None:
    """Delete everything in `directory` except `keep` paths and their parents."""
    for entry in list(os.scandir(directory)):
        path = Path(entry.path)
        if path in keep:
            continue
        if entry.is_dir(follow_symlinks=False):
            if any(k.is_relative_to(path) for k in keep):
                _clear(path, keep)
            else:
                shutil.rmtree(path)
        else:
            path.unlink()


@dataclass(frozen=True)
class Snapshot:
    """A copy of `workdir` (minus `excluded`) kept in `copy`, outside the workdir."""

    workdir: Path
    copy: Path
    excluded: frozenset[Path]

    @classmethod
    def take(cls, workdir: Path, copy: Path, excluded: frozenset[Path] = frozenset()) -> Snapshot:
        """Copy `workdir` into the new directory `copy`, which must lie outside it."""
        workdir, copy = workdir.resolve(), copy.resolve()
        if workdir == Path(workdir.anchor):
            raise SnapshotError("refusing to snapshot and restore a filesystem root")
        if copy.is_relative_to(workdir) or workdir.is_relative_to(copy):
            raise SnapshotError(f"snapshot directory {copy} overlaps the workdir {workdir}")
        copy.mkdir()
        try:
            _copy_tree(workdir, copy, excluded)
        except OSError as exc:
            raise SnapshotError(f"cannot snapshot {workdir}: {exc}") from exc
        shutil.copystat(workdir, copy)
        return cls(workdir, copy, excluded)

    def restore(self) -> None:
        """Make the workdir's contents equal the snapshot again, at the same path."""
        try:
            _clear(self.workdir, self.excluded)
            _copy_tree(self.copy, self.workdir, frozenset())
            shutil.copystat(self.copy, self.workdir)
        except OSError as exc:
            raise SnapshotError(
                f"cannot restore {self.workdir}: {exc}; its original contents are in {self.copy}"
            ) from exc
