"""The daemon's operator config: who may use it, how much one run may take, the floor.

TOML, decoded strictly with msgspec through the policy files' machinery
(`policy.load.decode_toml`), so every mistake is one line
`FILE:LINE: field PATH: problem`. Every key is optional; no file at all
means the defaults below (root only, no floor).

    version = 1
    [socket]
    path = "/run/assay-runner/runner.sock"
    group = "assay-runner"            # the socket's group; mode 0660, others get no access
    [access]
    allowed_groups = ["assay-runner"] # callers must be in one (root always may)
    [limits]
    max_concurrent_runs = 8
    pids_max = 4096                   # per run (cgroup pids.max)
    memory_max = "4G"                 # per run (cgroup memory.max), bytes or K/M/G/T
    [floor]
    policy = "/etc/assay-runner/floor.toml"
    [sensor]
    ringbuf_pages = 4096              # the one ring every run shares (16 MiB), a power of two
"""

from __future__ import annotations

import grp
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from ebpf.wire import RUN_SLOTS
from policy.load import PolicyFileError, decode_toml, load_policy
from policy.model import Policy, PolicyError
from runner.capture.limits import CgroupLimits
from runner.errors import RunnerError
from runner.ship.oci import Reference
from runner.ship.queue import DEFAULT_QUEUE

DEFAULT_SOCKET = "/run/assay-runner/runner.sock"
DEFAULT_CONFIG = Path("/etc/assay-runner/daemon.toml")
_SIZE = re.compile(r"(\d+)([KMGT]?)", re.ASCII)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
DAEMON_RINGBUF_PAGES = 4096
"""16 MiB: the shared ring holds several runs' bursts between the observer's drains."""
MAX_RINGBUF_PAGES = 16384
"""64 MiB of pinned kernel memory at most."""


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class SocketSection(_Section):
    path: str = DEFAULT_SOCKET
    group: str = ""
    """Group owning the socket; empty keeps root's group (then only root can connect)."""


class AccessSection(_Section):
    allowed_groups: tuple[str, ...] = ()


class LimitsSection(_Section):
    max_concurrent_runs: int = 8
    pids_max: int | None = None
    memory_max: int | str | None = None


class FloorSection(_Section):
    policy: str | None = None


class SensorSection(_Section):
    ringbuf_pages: int = DAEMON_RINGBUF_PAGES


class ShipSection(_Section):
    ref: str | None = None
    """REGISTRY/REPOSITORY that every finished archive is pushed to as `REF:<run id>` (runner/ship/)."""
    queue_dir: str = str(DEFAULT_QUEUE)
    plain_http: bool | None = None


class ConfigDocument(_Section):
    version: Literal[1] = 1
    socket: SocketSection = SocketSection()
    access: AccessSection = AccessSection()
    limits: LimitsSection = LimitsSection()
    floor: FloorSection = FloorSection()
    sensor: SensorSection = SensorSection()
    ship: ShipSection = ShipSection()


@dataclass(frozen=True)
class DaemonConfig:
    """The config with names resolved to ids and the floor policy loaded."""

    socket_path: Path
    socket_gid: int | None
    allowed_gids: frozenset[int]
    allowed_groups: tuple[str, ...]
    max_concurrent_runs: int
    limits: CgroupLimits
    floor: Policy | None
    ringbuf_pages: int = DAEMON_RINGBUF_PAGES
    ship: ShipSection = field(default_factory=ShipSection)


def _gid(name: str, loc: tuple[str | int, ...]) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise PolicyError(loc, f"no group {name!r} on this host: create it (groupadd {name}) "
                               "or name an existing one") from None


def memory_bytes(value: int | str | None) -> int | None:
    """`limits.memory_max` (`4G`, `512M` or a byte count) as bytes."""
    loc = ("limits", "memory_max")
    if value is None:
        return None
    match = _SIZE.fullmatch(str(value))
    if not match or int(match[1]) <= 0:
        raise PolicyError(loc, f'expected a positive byte count or a size like "512M" or "4G", got {value!r}')
    return int(match[1]) * _UNITS[match[2]]


def _validate(doc: ConfigDocument) -> None:
    """Problems the types cannot say, each naming its key."""
    if not doc.socket.path.startswith("/"):
        raise PolicyError(("socket", "path"), f"expected an absolute path, got {doc.socket.path!r}")
    if doc.socket.group:
        _gid(doc.socket.group, ("socket", "group"))
    for i, name in enumerate(doc.access.allowed_groups):
        _gid(name, ("access", "allowed_groups", i))
    if not 1 <= doc.limits.max_concurrent_runs < RUN_SLOTS:
        raise PolicyError(("limits", "max_concurrent_runs"), f"expected 1 to {RUN_SLOTS - 1} "
                          "(the runs one loaded monitor tells apart)")
    pages = doc.sensor.ringbuf_pages
    if pages < 1 or pages & (pages - 1) or pages > MAX_RINGBUF_PAGES:
        raise PolicyError(("sensor", "ringbuf_pages"), f"expected a power of two up to {MAX_RINGBUF_PAGES}")
    if doc.limits.pids_max is not None and doc.limits.pids_max < 1:
        raise PolicyError(("limits", "pids_max"), "expected at least 1")
    memory_bytes(doc.limits.memory_max)
    if doc.ship.ref is not None:
        try:
            ref = Reference.parse(doc.ship.ref)
        except RunnerError as exc:
            raise PolicyError(("ship", "ref"), str(exc)) from None
        if ref.tag or ref.digest:
            raise PolicyError(("ship", "ref"), "name a repository, no tag: runs are pushed as REF:<run id>")
    if not doc.ship.queue_dir.startswith("/"):
        raise PolicyError(("ship", "queue_dir"), f"expected an absolute path, not {doc.ship.queue_dir!r}")
    if doc.floor.policy is not None and not doc.floor.policy.startswith("/"):
        raise PolicyError(("floor", "policy"), f"expected an absolute path, got {doc.floor.policy!r}")


def load_config(path: Path | None) -> DaemonConfig:
    """The config at `path` (or the defaults when None); RunnerError with the located problem."""
    try:
        doc = ConfigDocument() if path is None else decode_toml(
            _read(path), str(path), ConfigDocument, _validate)
        floor = load_policy(doc.floor.policy) if doc.floor.policy else None
    except PolicyFileError as exc:
        raise RunnerError(str(exc)) from None
    return DaemonConfig(
        socket_path=Path(doc.socket.path),
        socket_gid=_gid(doc.socket.group, ()) if doc.socket.group else None,
        allowed_gids=frozenset(_gid(g, ()) for g in doc.access.allowed_groups),
        allowed_groups=doc.access.allowed_groups,
        max_concurrent_runs=doc.limits.max_concurrent_runs,
        limits=CgroupLimits(pids_max=doc.limits.pids_max, memory_max=memory_bytes(doc.limits.memory_max)),
        floor=floor,
        ringbuf_pages=doc.sensor.ringbuf_pages,
        ship=doc.ship,
    )


def _read(path: Path) -> str:
    try:
        return path.read_text("utf-8")
    except OSError as exc:
        raise RunnerError(f"cannot read the daemon config {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RunnerError(f"{path}: the daemon config is not UTF-8 text") from None
