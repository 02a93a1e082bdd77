"""Per-run resource limits: the most processes and memory a run's cgroup may use.

The daemon sets them from its operator config so one caller cannot starve a
shared host. On a unified (cgroup v2) host the limits are `pids.max` and
`memory.max` of the run's own cgroup, after the `pids` and `memory`
controllers are enabled down to it. A hybrid host keeps those controllers on
their cgroup v1 hierarchies (the v2 tree offers none of them), so there the
run gets a sibling cgroup in each v1 hierarchy (`pids.max`,
`memory.limit_in_bytes`) that the helper joins before anything of the
command exists. A limit the operator or user asked for that the host cannot
enforce is an error, never ignored; direct mode's default limits
(`required=False`) are recorded as unavailable instead, and the archive's
health says so (`s3_resource_limits: ... unavailable=pids`).

After the command exits, `LimitGroups.events` reads how often each limit
refused the run (`pids.events`, `memory.events`; on v1 `memory.failcnt` and
`memory.oom_control`), and the counts become a health note: a fork refused
by the pids limit or a task taken by the OOM killer is part of what the
command experienced.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from runner.capture.cgroup import RunCgroup, parent_name
from runner.errors import RunnerError
from runner.host.mounts import cgroup2_mount, mounts
from runner.logs import get_logger

log = get_logger("limits")
V1_FILES = {"pids": "pids.max", "memory": "memory.limit_in_bytes"}
V2_FILES = {"pids": "pids.max", "memory": "memory.max"}


@dataclass(frozen=True)
class CgroupLimits:
    """Limits for one run; None leaves that resource unlimited."""

    pids_max: int | None = None
    memory_max: int | None = None
    required: bool = True
    """False for defaults: a controller the host lacks is recorded, not an error."""

    def values(self) -> dict[str, int]:
        wanted = {"pids": self.pids_max, "memory": self.memory_max}
        return {name: value for name, value in wanted.items() if value is not None}


DEFAULT_PIDS_MAX = 4096
"""Direct mode's default: room for a parallel build's processes and threads, not for a fork bomb."""
DEFAULT_LIMITS = CgroupLimits(pids_max=DEFAULT_PIDS_MAX, required=False)


@dataclass(frozen=True)
class LimitGroups:
    """What enforces a run's limits: v1 cgroups to join (none on v2) and remove afterwards."""

    v1_dirs: tuple[Path, ...] = ()
    v2_dir: Path | None = None
    """The run's own cgroup when it carries a limit (cgroup v2)."""
    applied: tuple[tuple[str, int], ...] = ()
    """(`pids_max`/`memory_max`, value) for each limit in force."""
    unavailable: tuple[str, ...] = ()
    """Controllers of default limits that this host does not have."""

    @property
    def procs_files(self) -> tuple[Path, ...]:
        return tuple(d / "cgroup.procs" for d in self.v1_dirs)

    @classmethod
    def create(cls, cgroup: RunCgroup, limits: CgroupLimits | None) -> LimitGroups:
        """Apply `limits` to the run; RunnerError names the controller the host lacks."""
        wanted = limits.values() if limits else {}
        if not wanted:
            return cls()
        v2 = _v2_controllers()
        made: list[Path] = []
        applied: list[tuple[str, int]] = []
        unavailable: list[str] = []
        try:
            for name, value in wanted.items():
                try:
                    made += _apply(cgroup, name, value, v2)
                except RunnerError:
                    if limits is None or limits.required:
                        raise
                    log.warning("run.limit_unavailable", limit=name, hint="doctor's 'limits' line says why")
                    unavailable.append(name)
                    continue
                applied.append((f"{name}_max", value))
        except BaseException:
            cls(tuple(made)).remove()
            raise
        uses_v2 = any(name in v2 for name, _ in applied)
        return cls(tuple(made), cgroup.path if uses_v2 else None, tuple(applied), tuple(unavailable))

    def events(self) -> dict[str, int]:
        """How often the limits refused the run so far; only non-zero counts.

        `pids_refused`: forks refused by pids.max; `oom_kills`: tasks the OOM
        killer took at the memory limit. How often usage merely touched the
        memory limit (memory.events `max`, v1 `memory.failcnt`) is left out:
        it counts reclaim attempts, which vary from run to run.
        """
        dirs = (*self.v1_dirs, *((self.v2_dir,) if self.v2_dir else ()))
        counts = {  # a file the controller does not have reads as 0
            "pids_refused": sum(_keyed(d / "pids.events", "max") for d in dirs),
            "oom_kills": sum(_keyed(d / "memory.events", "oom_kill")
                             + _keyed(d / "memory.oom_control", "oom_kill") for d in dirs),
        }
        return {k: v for k, v in counts.items() if v}

    def remove(self) -> None:
        """Remove the v1 groups (empty once the run's processes are gone)."""
        for d in self.v1_dirs:
            with contextlib.suppress(OSError):
                d.rmdir()


def _v2_controllers() -> set[str]:
    with contextlib.suppress(OSError):
        return set((cgroup2_mount() / "cgroup.controllers").read_text().split())
    return set()


def _apply(cgroup: RunCgroup, name: str, value: int, v2: set[str]) -> list[Path]:
    """Set one limit; the v1 cgroup made for it, if any. RunnerError when the host cannot."""
    if name in v2:
        _enable_v2(cgroup.path, name)
        _write(cgroup.path / V2_FILES[name], value)
        return []
    mount = v1_mount(name)
    if mount is None:
        raise RunnerError(f"the {name} limit cannot be enforced: this host has no {name} cgroup "
                          "controller (neither cgroup v2 nor v1); remove the limit or enable it")
    group = _v1_group(name, mount, cgroup.path.name)
    try:
        _write(group / V1_FILES[name], value)
    except RunnerError:
        with contextlib.suppress(OSError):
            group.rmdir()
        raise
    return [group]


def _enable_v2(run: Path, name: str) -> None:
    """`+name` in subtree_control from the cgroup2 root down to the run's parent."""
    mount = cgroup2_mount()
    parts = run.parent.relative_to(mount).parts
    for directory in (mount.joinpath(*parts[:i]) for i in range(len(parts) + 1)):
        control = directory / "cgroup.subtree_control"
        if name not in control.read_text().split():
            _write(control, f"+{name}")


def available() -> dict[str, str]:
    """Where each limit controller is on this host: `cgroup v2`, `cgroup v1`, or why it is unavailable."""
    v2 = _v2_controllers()
    found = {}
    for name in V2_FILES:
        mount = v1_mount(name)
        if name in v2:
            found[name] = "cgroup v2"
        elif mount is None:
            found[name] = "unavailable"
        else:  # a container may see the hierarchy read-only
            found[name] = "cgroup v1" if os.access(mount, os.W_OK) else "unavailable (read-only cgroup v1)"
    return found


def v1_mount(name: str) -> Path | None:
    """The mount point of the cgroup v1 hierarchy holding controller `name`, if any."""
    for m in mounts():
        if m.fstype == "cgroup" and name in m.mount_point.name.split(","):
            return m.mount_point
    return None


def _v1_group(name: str, mount: Path, leaf: str) -> Path:
    """A fresh cgroup for the run in the v1 hierarchy of controller `name`."""
    path = mount / parent_name() / leaf
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        raise RunnerError(f"cannot create the {name} limit cgroup {path}: {exc.strerror}") from exc
    return path


def _keyed(path: Path, key: str) -> int:
    """The value of `key` in a `key value` per line file (0 when absent)."""
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    return 0


def _write(path: Path, value: int | str) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError as exc:
        raise RunnerError(f"cannot set {path}: {exc.strerror}") from exc
