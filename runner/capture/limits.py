"""Per-run resource limits: the most processes and memory a run's cgroup may use.

The daemon sets them from its operator config so one caller cannot starve a
shared host. On a unified (cgroup v2) host the limits are `pids.max` and
`memory.max` of the run's own cgroup, after the `pids` and `memory`
controllers are enabled down to it. A hybrid host keeps those controllers on
their cgroup v1 hierarchies (the v2 tree offers none of them), so there the
run gets a sibling cgroup in each v1 hierarchy (`pids.max`,
`memory.limit_in_bytes`) that the helper joins before anything of the
command exists. A limit the host cannot enforce is an error, never ignored.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from runner.capture.cgroup import PARENT, RunCgroup
from runner.errors import RunnerError
from runner.host.mounts import cgroup2_mount, mounts

V1_FILES = {"pids": "pids.max", "memory": "memory.limit_in_bytes"}
V2_FILES = {"pids": "pids.max", "memory": "memory.max"}


@dataclass(frozen=True)
class CgroupLimits:
    """Limits for one run; None leaves that resource unlimited."""

    pids_max: int | None = None
    memory_max: int | None = None

    def values(self) -> dict[str, int]:
        wanted = {"pids": self.pids_max, "memory": self.memory_max}
        return {name: value for name, value in wanted.items() if value is not None}


@dataclass(frozen=True)
class LimitGroups:
    """What enforces a run's limits: v1 cgroups to join (none on v2) and remove afterwards."""

    v1_dirs: tuple[Path, ...] = ()

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
        try:
            for name, value in wanted.items():
                if name in v2:
                    _enable_v2(cgroup.path, name)
                    _write(cgroup.path / V2_FILES[name], value)
                else:
                    made.append(_v1_group(name, cgroup.path.name))
                    _write(made[-1] / V1_FILES[name], value)
        except BaseException:
            cls(tuple(made)).remove()
            raise
        return cls(tuple(made))

    def remove(self) -> None:
        """Remove the v1 groups (empty once the run's processes are gone)."""
        for d in self.v1_dirs:
            with contextlib.suppress(OSError):
                d.rmdir()


def _v2_controllers() -> set[str]:
    with contextlib.suppress(OSError):
        return set((cgroup2_mount() / "cgroup.controllers").read_text().split())
    return set()


def _enable_v2(run: Path, name: str) -> None:
    """`+name` in subtree_control from the cgroup2 root down to the run's parent."""
    mount = cgroup2_mount()
    parts = run.parent.relative_to(mount).parts
    for directory in (mount.joinpath(*parts[:i]) for i in range(len(parts) + 1)):
        control = directory / "cgroup.subtree_control"
        if name not in control.read_text().split():
            _write(control, f"+{name}")


def _v1_group(name: str, leaf: str) -> Path:
    """A fresh cgroup for the run in the v1 hierarchy of controller `name`."""
    for m in mounts():
        if m.fstype == "cgroup" and name in m.mount_point.name.split(","):
            path = m.mount_point / PARENT / leaf
            try:
                path.mkdir(parents=True)
            except OSError as exc:
                raise RunnerError(f"cannot create the {name} limit cgroup {path}: {exc.strerror}") from exc
            return path
    raise RunnerError(f"the operator config limits {name}, but this host has no {name} cgroup controller "
                      "(neither cgroup v2 nor v1): remove the limit or enable the controller")


def _write(path: Path, value: int | str) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError as exc:
        raise RunnerError(f"cannot set {path}: {exc.strerror}") from exc
