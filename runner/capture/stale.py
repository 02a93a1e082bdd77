"""Clean up after runners that died: their cgroups, what is left running in them, their spools.

A runner killed with SIGKILL (or a crashed daemon worker) cannot remove its
run cgroup; its warden (runner/capture/warden.py) kills what ran in it at
once, but the cgroup stays, and so does `<run id>.spool.partial`. `run`
sweeps before it starts, the daemon when a worker dies, and `doctor --fix`
on demand (`doctor` only reports): a directory under `assay-runner/` in the
cgroup v2 tree (or a per-run limit cgroup in a v1 hierarchy) is acted on
only when its owner record (owner.py, where the command cannot write) names
this very cgroup, the hint on the cgroup (if any) agrees with it, and the
runner it names is gone. A cgroup without a record, with a record that does
not match it, or with a live (or maybe live) owner is never touched, and
the sweep says which it skipped and why (a live owner's only in the log: a
concurrent run is normal).

When the record says where the dead run's spool was, the spool is closed
(spool/recover.py) and normalized into `<run id>.tar.gz` beside it, marked
partial (`s2_run_recovered`, with the interval nobody observed). Nothing is
replaced: an existing archive, a changed `--out` or a spool without a header
is said, not overwritten; a spool name that is not `<run id>.spool` is
refused (runner/capture/rebuild.py).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from runner.capture.cgroup import RunCgroup, parent_name
from runner.capture.limits import V1_FILES, v1_mount
from runner.capture.owner import (
    Owner,
    alive,
    death_time,
    name_pid,
    read_owner,
    read_record,
    records_dir,
    remove_record,
    start_time,
)
from runner.errors import RunnerError
from runner.host.mounts import cgroup2_mount
from runner.logs import get_logger
from spool.dirfd import open_dir

log = get_logger("stale")


@dataclass(frozen=True)
class Stale:
    path: Path
    owner: Owner
    record: Path
    v2: bool
    """The run's cgroup v2 (its spool is recovered with it), not a v1 limit group."""
    died_ns: int | None
    """When its runner died, as recorded then (read now: a concurrent sweep may remove the record)."""


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str
    live: bool
    """Skipped because its owner is (or may be) running: normal, logged only."""


def survey() -> tuple[list[Stale], list[Skipped]]:
    """Every run cgroup (v2, then the v1 limit groups) judged by its record: stale or skipped."""
    stale: list[Stale] = []
    skipped: list[Skipped] = []
    try:
        records = records_dir(parent_name(), create=False)
    except (RunnerError, OSError) as exc:
        log.warning("stale.no_records", error=str(exc))
        return [], []
    index = _records(records)
    for parent, v2 in parents_with_kind():
        with contextlib.suppress(OSError):
            for path in sorted(p for p in parent.iterdir() if p.is_dir()):
                verdict = _judge(path, v2, index)
                if isinstance(verdict, Stale):
                    stale.append(verdict)
                else:
                    skipped.append(verdict)
    return stale, skipped


def sweep() -> list[str]:
    """Kill what is left in stale run cgroups, remove them, recover their spools; one line per thing done
    or skipped (a live owner's cgroup is only logged)."""
    stale, skipped = survey()
    lines = [f"left the cgroup {s.path} alone: {s.reason}" for s in skipped if not s.live]
    for s in skipped:
        if s.live:
            log.info("stale.skipped", cgroup=str(s.path), reason=s.reason)
    for found in stale:
        if not alive(found.owner) and read_record(found.record) == found.owner:  # still, just before acting
            lines += _clean(found)
    for found in stale:  # after the v1 limit groups, which are judged by the same record
        if found.v2 and not found.path.exists():
            remove_record(found.record)
    _forget_gone()
    for line in lines:
        log.warning("stale.cleaned", what=line)
    return lines


def _clean(found: Stale) -> list[str]:
    try:
        killed = _empty_and_remove(found.path)
    except (RunnerError, OSError) as exc:
        if not found.path.exists():
            return []
        lines = [f"cannot remove the stale run cgroup {found.path}: {exc}"]
    else:
        lines = [f"removed the cgroup {found.path} of a runner that died (pid {found.owner.pid})"
                 + (f", killing {killed} processes left in it" if killed else "")]
    if found.v2 and found.owner.spool:
        lines.append(_recover_spool(found.owner, found.died_ns))
    return lines


def _forget_gone() -> None:
    """Remove the records of dead runners whose cgroup is gone (it died after removing it)."""
    with contextlib.suppress(RunnerError, OSError):
        for record, owner in _records(records_dir(parent_name(), create=False)).values():
            if owner is not None and not Path(owner.cgroup).exists() and not alive(owner):
                remove_record(record)


def _records(directory: Path) -> dict[str, tuple[Path, Owner | None]]:
    """The records in `directory`, by the name of the cgroup they name (None: unreadable)."""
    index: dict[str, tuple[Path, Owner | None]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.name.isdigit():
                owner = read_record(Path(entry.path))
                index[Path(owner.cgroup).name if owner else entry.name] = (Path(entry.path), owner)
    return index


def _judge(path: Path, v2: bool, index: dict[str, tuple[Path, Owner | None]]) -> Stale | Skipped:
    """A cgroup's verdict: stale only when its record names it, agrees with its hint, and is dead."""
    found = index.get(path.name)
    owner = found[1] if found else None
    if found is None or owner is None:
        pid = name_pid(path)
        if pid is not None and start_time(pid) is not None:  # its runner is still making it
            return Skipped(path, f"no owner record yet; pid {pid} of its name is running", live=True)
        return Skipped(path, "it has no owner record (not made by a runner of this version, or forged)",
                       live=False)
    record = found[0]
    if v2:
        try:
            ino = path.stat().st_ino
        except OSError:
            return Skipped(path, "it vanished", live=True)
        if record.name != str(ino) or owner.cgroup != str(path):
            return Skipped(path, f"its owner record {record} names another cgroup", live=False)
        hint = read_owner(path)
        if hint is not None and hint != owner:
            return Skipped(path, f"the owner hint on it disagrees with its record {record}", live=False)
    if alive(owner):
        return Skipped(path, f"its runner (pid {owner.pid}) is running", live=True)
    return Stale(path, owner, record, v2, death_time(record))


def parents() -> list[Path]:
    """The directories that hold run cgroups: in the cgroup v2 tree and the v1 limit hierarchies."""
    return [p for p, _ in parents_with_kind()]


def parents_with_kind() -> list[tuple[Path, bool]]:
    """`parents()`, each with whether it is the cgroup v2 one."""
    name = parent_name()
    found = [(m / name, False) for m in (v1_mount(n) for n in V1_FILES) if m is not None]
    with contextlib.suppress(RunnerError):  # no cgroup v2 at all: nothing of ours there
        found.insert(0, (cgroup2_mount() / name, True))
    return found


ORPHAN_REAP_S = 30.0
"""How long the sweep waits for a dead run's cgroup to empty. The runner's own children outlive it as
orphans of pid 1, and a cgroup stays busy until its zombies are reaped: a pid 1 that reaps slowly
(seen here: a sandbox's init, some seconds) would otherwise leave the cgroup and the spool behind."""


def _empty_and_remove(path: Path) -> int:
    """Kill every process in `path` (cgroup.kill, else pid by pid) and remove it; how many there were."""
    group = RunCgroup(path=path, id=0, level=0)
    killed = len(group.pids())
    group.remove(timeout=ORPHAN_REAP_S)
    return killed


def _recover_spool(owner: Owner, died_ns: int | None) -> str:
    """Close and normalize the dead run's spool; what was done, or why it could not be."""
    from runner.capture.rebuild import rebuild

    try:
        out_fd = open_dir(owner.out)
    except OSError as exc:
        return f"cannot recover the spool {owner.spool} in {owner.out}: {exc.strerror}"
    try:
        st = os.fstat(out_fd)
        if (st.st_dev, st.st_ino) != (owner.out_dev, owner.out_ino):
            return (f"cannot recover the spool {owner.spool}: {owner.out} is no longer the directory the run "
                    "wrote to; nothing was touched there")
        return rebuild(out_fd, Path(owner.out), owner.spool, died_ns)
    finally:
        os.close(out_fd)
