"""The run's own cgroup v2: created fresh, filtered on in-kernel, removed after.

The cgroup lives under `<cgroup2 mount>/assay-runner/` (another directory
name with `ASSAY_RUNNER_CGROUP_PARENT`: a CI host can give each job its own,
and a job's clean-up of runners that died then sees only that job's runs).
Its path is a runner control value: it never appears in normalized evidence.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from runner.capture.owner import Owner, records_dir, remove_record, write_owner, write_record
from runner.errors import RunnerError
from runner.host.mounts import cgroup2_mount

PARENT = "assay-runner"
PARENT_ENV = "ASSAY_RUNNER_CGROUP_PARENT"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_fixed_mount: Path | None = None


def fix_mount() -> Path:
    """Read where cgroup v2 is mounted once, for every run this process makes from now on.

    For the daemon: its network programs are linked below that mount when it
    starts, so its runs belong there for its whole life; and parsing
    mountinfo cost about 1 ms of every run's start. Other processes read it
    at each use.
    """
    global _fixed_mount
    _fixed_mount = cgroup2_mount()
    return _fixed_mount


def _mount() -> Path:
    return _fixed_mount or cgroup2_mount()


def parent_name() -> str:
    """The directory under each cgroup mount that holds run cgroups (PARENT unless the environment says)."""
    name = os.environ.get(PARENT_ENV) or PARENT
    if not _NAME.fullmatch(name) or len(name) > 64:
        raise RunnerError(f"{PARENT_ENV}={name!r}: use one directory name of letters, digits, '_', '.', '-'")
    return name


@dataclass(frozen=True)
class RunCgroup:
    """A leaf cgroup for one run; `id` and `level` are what the BPF filter needs."""

    path: Path
    id: int
    level: int
    record: Path | None = None
    """Its owner record (owner.py), removed with the cgroup."""

    @staticmethod
    def parent_path() -> Path:
        """Where every run cgroup is made."""
        return _mount() / parent_name()

    @staticmethod
    def root_path() -> Path:
        """The cgroup v2 root, where the network programs are linked: a run's process that left
        the run's cgroup is still below it (ebpf/netpolicy.c)."""
        return _mount()

    @classmethod
    def create(cls, label: str, owner: Owner | None = None) -> RunCgroup:
        """Make a fresh, uniquely named cgroup for the run `label`, recorded as `owner`'s (owner.py)
        before anything can join it."""
        mount = _mount()
        path = mount / parent_name() / f"{label}-{os.getpid()}-{secrets.token_hex(4)}"
        records = records_dir(parent_name()) if owner is not None else None
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise RunnerError(f"cannot create the run cgroup {path}: {exc.strerror}") from exc
        ino = path.stat().st_ino
        record = None
        if owner is not None and records is not None:
            owner = msgspec.structs.replace(owner, cgroup=str(path))
            try:
                record = write_record(records, ino, owner)
            except OSError as exc:
                path.rmdir()
                raise RunnerError(f"cannot record the owner of the run cgroup in {records}: "
                                  f"{exc.strerror}") from exc
            write_owner(path, owner)
        level = len(path.relative_to(mount).parts)
        return cls(path=path, id=ino, level=level, record=record)

    @property
    def hierarchy_path(self) -> str:
        """The cgroup's path below the cgroup2 mount (`/assay-runner/...`), as the kernel names it."""
        return "/" + "/".join(self.path.parts[-self.level:])

    def add(self, pid: int) -> None:
        """Move `pid` into the cgroup (called by the child for itself before exec)."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> list[int]:
        """Every pid in the cgroup and its descendants."""
        out: list[int] = []
        for directory, _subdirs, _files in os.walk(self.path):
            try:
                with open(os.path.join(directory, "cgroup.procs")) as procs:
                    out += [int(p) for p in procs.read().split()]
            except OSError:
                continue
        return out

    def kill(self) -> None:
        """SIGKILL everything left in the cgroup (cgroup.kill, or pid by pid)."""
        kill_file = self.path / "cgroup.kill"
        try:
            kill_file.write_text("1\n")
            return
        except OSError:
            pass
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, timeout: float = 5.0) -> None:
        """Kill leftovers, wait for the cgroup to empty, and remove it bottom-up."""
        deadline = time.monotonic() + timeout
        if self.pids():
            self.kill()
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        for directory, subdirs, _files in os.walk(self.path, topdown=False):  # deepest first
            for sub in subdirs:
                _rmdir(os.path.join(directory, sub), deadline)
        try:
            _rmdir(str(self.path), deadline)
        except OSError as exc:
            raise RunnerError(f"cannot remove the run cgroup {self.path}: {exc.strerror}") from exc
        if self.record is not None:
            remove_record(self.record)


def _rmdir(path: str, deadline: float) -> None:
    """rmdir a cgroup, retrying EBUSY until `deadline`: a killed task leaves `cgroup.procs` before
    it has finished exiting, and the cgroup stays populated (busy) until it has."""
    while True:
        try:
            os.rmdir(path)
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise
        time.sleep(0.01)
