"""Clean up after runners that died: their cgroups, what is left running in them, their spools.

A runner killed with SIGKILL (or a crashed daemon worker) cannot remove its
run cgroup. `PDEATHSIG` takes its helper and the command's pid namespace
down with it, but the cgroup stays, and so does `<run id>.spool.partial`.
`run` sweeps before it starts and `doctor --fix` on demand (`doctor` only
reports): every directory under `assay-runner/` in the cgroup v2 tree (and
the per-run limit cgroups in v1 hierarchies) whose owner (owner.py) is gone
is emptied with `cgroup.kill` and removed. A cgroup whose owner is alive, or
might be, is never touched: a concurrent run's is safe.

When the record says where the dead run's spool was, the spool is closed
(spool/recover.py) and normalized into `<run id>.tar.gz` beside it, marked
partial (`s2_run_recovered`). Nothing is replaced: an existing archive, a
changed `--out` or a spool without a header is said, not overwritten.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from runner.capture.cgroup import RunCgroup, parent_name
from runner.capture.limits import V1_FILES, v1_mount
from runner.capture.owner import Owner, alive, read_owner
from runner.errors import RunnerError
from runner.host.mounts import cgroup2_mount
from runner.logs import get_logger
from spool.dirfd import open_dir

log = get_logger("stale")


@dataclass(frozen=True)
class Stale:
    path: Path
    owner: Owner


def find() -> list[Stale]:
    """Run cgroups (v2 and v1 limit groups) whose runner is gone; [] when there is no such tree."""
    found = []
    for parent in parents():
        with contextlib.suppress(OSError):
            for path in sorted(parent.iterdir()):
                owner = read_owner(path) if path.is_dir() else None
                if owner is not None and not alive(owner):
                    found.append(Stale(path, owner))
    return found


def sweep() -> list[str]:
    """Kill what is left in stale run cgroups, remove them, recover their spools; one line per thing done."""
    lines = []
    for stale in find():
        try:
            killed = _empty_and_remove(stale.path)
        except (RunnerError, OSError) as exc:
            if stale.path.exists():  # else another sweeper got there first
                lines.append(f"cannot remove the stale run cgroup {stale.path}: {exc}")
            continue
        lines.append(f"removed the cgroup {stale.path} of a runner that died (pid {stale.owner.pid})"
                     + (f", killing {killed} processes left in it" if killed else ""))
        if stale.owner.spool:
            lines.append(_recover_spool(stale.owner))
    for line in lines:
        log.warning("stale.cleaned", what=line)
    return lines


def parents() -> list[Path]:
    """The directories that hold run cgroups: in the cgroup v2 tree and the v1 limit hierarchies."""
    name = parent_name()
    found = [m / name for m in (v1_mount(n) for n in V1_FILES) if m is not None]
    with contextlib.suppress(RunnerError):  # no cgroup v2 at all: nothing of ours there
        found.insert(0, cgroup2_mount() / name)
    return found


def _empty_and_remove(path: Path) -> int:
    """Kill every process in `path` (cgroup.kill, else pid by pid) and remove it; how many there were."""
    group = RunCgroup(path=path, id=0, level=0)
    killed = len(group.pids())
    group.remove()
    return killed


def _recover_spool(owner: Owner) -> str:
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
        return rebuild(out_fd, Path(owner.out), owner.spool)
    finally:
        os.close(out_fd)
