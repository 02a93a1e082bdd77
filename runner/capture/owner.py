"""Who made a run cgroup, written on the cgroup itself, so a later runner can tell a dead run from a live one.

The record is the extended attribute `trusted.assay_runner.owner` on the
run's cgroup v2 directory (only root may read or write `trusted.*`): the
runner's pid and that process's start time (so a reused pid is not taken for
the runner), and where the run's spool is being written (`--out`, with its
device and inode, and the spool's name). The cgroup's name carries the pid
too (`<run id>-<pid>-<random>`): a cgroup without the record (made by an
older runner, or in the instant between mkdir and the record) is judged by
that pid alone, conservatively: alive means not stale.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import msgspec

XATTR = "trusted.assay_runner.owner"


class Owner(msgspec.Struct, frozen=True):
    """The runner process that owns a run cgroup, and where its spool goes."""

    pid: int
    start: int | None
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22)."""
    out: str = ""
    out_dev: int = 0
    out_ino: int = 0
    spool: str = ""
    """The spool's final name in `out` (the run writes `<spool>.partial` until it is complete)."""


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def claim(out: Path, out_fd: int, spool: str) -> Owner:
    """This process as the owner of a run writing `spool` into the directory `out_fd` (at `out`)."""
    st = os.fstat(out_fd)
    return Owner(pid=os.getpid(), start=start_time(os.getpid()), out=str(out), out_dev=st.st_dev,
                 out_ino=st.st_ino, spool=spool)


def write_owner(path: Path, owner: Owner) -> None:
    """Record `owner` on the cgroup `path`; a filesystem without xattrs leaves only the name's pid."""
    with contextlib.suppress(OSError):
        os.setxattr(path, XATTR, msgspec.json.encode(owner))


def read_owner(path: Path) -> Owner | None:
    """The record on `path`, else an owner from the cgroup's name (`<label>-<pid>-<hex>`), else None."""
    with contextlib.suppress(OSError, msgspec.DecodeError):
        return msgspec.json.decode(os.getxattr(path, XATTR), type=Owner)
    parts = path.name.rsplit("-", 2)
    if len(parts) == 3 and parts[1].isdigit() and len(parts[2]) == 8:
        return Owner(pid=int(parts[1]), start=None)
    return None


def alive(owner: Owner) -> bool:
    """Is the owning runner still running? (Unsure counts as alive: a live run is never touched.)"""
    now = start_time(owner.pid)
    return now is not None and (owner.start is None or now == owner.start)
