"""Who made a run cgroup, recorded where the run's command cannot write, so a later runner can tell a
dead run from a live one.

The record is a file of a root-only (0700) directory,
`/run/assay-runner/owners/<cgroup parent>/<inode of the run cgroup>`
(`ASSAY_RUNNER_OWNERS_DIR` moves the first part; the cgroup parent's name,
runner/capture/cgroup.py, keeps a CI job's or a test's records apart),
written before the command exists: the runner's pid and that process's start
time (so a reused pid is not taken for the runner), the cgroup's path, and
where the run's spool is being written (`--out`, with its device and inode,
and the spool's name). The command runs in the cgroup, under the runner's
uid often, but never in that directory: a root command can write the cgroup's
extended attributes (Landlock does not cover them, `setxattr` is not traced),
so the `trusted.assay_runner.owner` attribute the runner also writes is a
hint that must agree with the record, never the record.

A runner that dies leaves the record; its warden (runner/capture/warden.py)
adds `<inode>.died` with the time of the death, which the recovery puts in
the rebuilt archive (the interval nobody observed).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path

import msgspec

from normalizer.artifacts import RUN_ID_MAX, is_safe_run_id
from runner.errors import RunnerError

XATTR = "trusted.assay_runner.owner"
OWNERS_ENV = "ASSAY_RUNNER_OWNERS_DIR"
OWNERS = Path("/run/assay-runner/owners")
DIED = ".died"
SPOOL_SUFFIX = ".spool"


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
    cgroup: str = ""
    """The run cgroup's path (the record names its cgroup, the file name is its inode)."""


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat, or None when there is no such process or it is a zombie (it has
    ended: a runner killed while its own parent is gone waits as a zombie for pid 1 to reap it)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat_line.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X", "x") else int(fields[19])


def claim(out: Path, out_fd: int, spool: str) -> Owner:
    """This process as the owner of a run writing `spool` into the directory `out_fd` (at `out`)."""
    st = os.fstat(out_fd)
    return Owner(pid=os.getpid(), start=start_time(os.getpid()), out=str(out), out_dev=st.st_dev,
                 out_ino=st.st_ino, spool=spool)


def spool_name_ok(name: str) -> bool:
    """A spool name read back from a record is `<run id>.spool` and nothing else: never a path."""
    run_id = name.removesuffix(SPOOL_SUFFIX)
    return name.endswith(SPOOL_SUFFIX) and 0 < len(run_id) <= RUN_ID_MAX and is_safe_run_id(run_id)


def records_dir(parent: str, create: bool = True) -> Path:
    """The record directory of the cgroup parent `parent`, made root-only if missing (unless not
    `create`: a reader finds no records there); a directory that is a symlink, not ours, or open
    to others is refused (RunnerError)."""
    base = Path(os.environ.get(OWNERS_ENV) or OWNERS)
    path = base / parent
    for d in (base, path):
        if create:
            with contextlib.suppress(FileExistsError):
                os.makedirs(d, mode=0o700, exist_ok=False)
        elif not os.path.lexists(d):
            return path
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise RunnerError(f"{d}: the owner records' directory must be a directory of uid "
                              f"{os.geteuid()} that no one else may use (mode 0700)")
    return path


def write_record(directory: Path, ino: int, owner: Owner) -> Path:
    """Record `owner` for the cgroup whose inode is `ino` (replacing a record of a removed cgroup that
    had the same inode), atomically; the record's path."""
    path = directory / str(ino)
    tmp = directory / f".{ino}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a runner with this pid died between creating and renaming it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, msgspec.json.encode(owner))
    finally:
        os.close(fd)
    os.replace(tmp, path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path.with_name(path.name + DIED))  # that earlier cgroup's
    return path


def read_record(path: Path) -> Owner | None:
    """The record at `path`; None when it is missing or not a record."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return msgspec.json.decode(os.read(fd, 1 << 16), type=Owner)
    except (OSError, msgspec.DecodeError):
        return None
    finally:
        os.close(fd)


def remove_record(path: Path) -> None:
    """Remove a record and its death time (the run's cgroup is gone)."""
    for p in (path, path.with_name(path.name + DIED)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def record_death(path: Path) -> None:
    """Beside the record `path`: when its runner died (CLOCK_REALTIME ns), for the recovery's note.
    Nothing when the record is gone (the run had removed its cgroup: there is nothing to recover)."""
    if not path.exists():
        return
    with contextlib.suppress(OSError):
        fd = os.open(path.with_name(path.name + DIED), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, str(time.time_ns()).encode())
        finally:
            os.close(fd)


def death_time(path: Path) -> int | None:
    """When the runner of the record `path` died, if its warden saw it (CLOCK_REALTIME ns)."""
    try:
        fd = os.open(path.with_name(path.name + DIED), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(fd, 32).decode(errors="replace")
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


def write_owner(path: Path, owner: Owner) -> None:
    """The hint on the cgroup `path` itself; a filesystem without xattrs has none."""
    with contextlib.suppress(OSError):
        os.setxattr(path, XATTR, msgspec.json.encode(owner))


def read_owner(path: Path) -> Owner | None:
    """The hint on the cgroup `path`, if any (it must agree with the record, which decides)."""
    with contextlib.suppress(OSError, msgspec.DecodeError):
        return msgspec.json.decode(os.getxattr(path, XATTR), type=Owner)
    return None


def name_pid(path: Path) -> int | None:
    """The runner pid a run cgroup's name carries (`<label>-<pid>-<8 hex>`), if it has that shape."""
    parts = path.name.rsplit("-", 2)
    if len(parts) == 3 and parts[1].isdigit() and len(parts[2]) == 8:
        return int(parts[1])
    return None


def alive(owner: Owner) -> bool:
    """Is the owning runner still running? (Unsure counts as alive: a live run is never touched.)"""
    now = start_time(owner.pid)
    return now is not None and (owner.start is None or now == owner.start)
