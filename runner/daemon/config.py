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
    max_runs_per_user = 4             # default: half of max_concurrent_runs (root is not counted)
    max_connections_per_user = 8      # connections still sending their request (root is not counted)
    request_timeout_s = 3             # a connection's time to send its request in full
    pids_max = 4096                   # per run (cgroup pids.max); the default, "max": none
    memory_max = "4G"                 # per run (cgroup memory.max), bytes or K/M/G/T; default; "max": none
    [floor]
    policy = "/etc/assay-runner/floor.toml"
    workspace_roots = ["/home/*/work"]  # required with a floor: where $WORKSPACE (the caller's cwd) may be
    [sensor]
    ringbuf_pages = 4096              # the one ring every run shares (16 MiB), a power of two
    tasks_max = 32768                 # live tasks tracked in all; each run slot gets an equal share
    [metrics]
    socket = "/run/assay-runner/metrics.sock"  # HTTP, root only; default: beside socket.path; "": none
    port = 0                          # the same on 127.0.0.1:PORT; 0: none
"""

from __future__ import annotations

import grp
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from ebpf.monitor import TASKS_MAX, MonitorConfig
from ebpf.wire import RUN_SLOTS
from policy.load import PolicyFileError, decode_toml, load_policy
from policy.model import Policy, PolicyError
from runner.capture.limits import DEFAULT_PIDS_MAX, CgroupLimits
from runner.errors import RunnerError
from runner.ship.oci import Reference
from runner.ship.queue import DEFAULT_QUEUE

DEFAULT_SOCKET = "/run/assay-runner/runner.sock"
DEFAULT_CONFIG = Path("/etc/assay-runner/daemon.toml")
_SIZE = re.compile(r"(\d+)([KMGT]?)", re.ASCII)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
DAEMON_RINGBUF_PAGES = 4096
"""16 MiB: the shared ring holds several runs' bursts between the observer's drains."""
DEFAULT_MEMORY_MAX = "4G"
"""Per run, unless the operator says otherwise: one run cannot take a shared host's memory."""
MAX_RINGBUF_PAGES = 16384
"""64 MiB of pinned kernel memory at most."""
MIN_TASKS_MAX, MAX_TASKS_MAX = 1024, 1 << 20
"""`sensor.tasks_max`: room for a few runs' process trees at least; a hash map of a million at most."""
MAX_CONNECTIONS_PER_USER = 64
"""The daemon's own bound on connections still sending their request (runner/daemon/server.py)."""


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Subclasses repeat `frozen=True`: msgspec inherits it, a type checker does not know that."""


class SocketSection(_Section, frozen=True):
    path: str = DEFAULT_SOCKET
    group: str = ""
    """Group owning the socket; empty keeps root's group (then only root can connect)."""


class AccessSection(_Section, frozen=True):
    allowed_groups: tuple[str, ...] = ()


class LimitsSection(_Section, frozen=True):
    max_concurrent_runs: int = 8
    max_runs_per_user: int | None = None
    """None: half of `max_concurrent_runs` (at least 1), so no one caller takes every slot."""
    max_connections_per_user: int = 8
    request_timeout_s: float = 3.0
    pids_max: int | Literal["max"] = DEFAULT_PIDS_MAX
    memory_max: int | str = DEFAULT_MEMORY_MAX


class FloorSection(_Section, frozen=True):
    policy: str | None = None
    workspace_roots: tuple[str, ...] = ()
    """Globs of the directories a caller's working directory must lie under (runner/daemon/workspace.py)."""


class SensorSection(_Section, frozen=True):
    ringbuf_pages: int = DAEMON_RINGBUF_PAGES
    tasks_max: int = TASKS_MAX


class MetricsSection(_Section, frozen=True):
    socket: str | None = None
    """Root-only (0600) unix socket serving Prometheus text over HTTP; None: `metrics.sock` beside
    the daemon's socket; empty: none."""
    port: int = 0
    """A TCP port on 127.0.0.1 serving the same; 0: none."""


class ShipSection(_Section, frozen=True):
    ref: str | None = None
    """REGISTRY/REPOSITORY that every finished archive is pushed to as `REF:<run id>` (runner/ship/)."""
    queue_dir: str = str(DEFAULT_QUEUE)
    plain_http: bool | None = None


class ConfigDocument(_Section, frozen=True):
    version: Literal[1] = 1
    socket: SocketSection = SocketSection()
    access: AccessSection = AccessSection()
    limits: LimitsSection = LimitsSection()
    floor: FloorSection = FloorSection()
    sensor: SensorSection = SensorSection()
    ship: ShipSection = ShipSection()
    metrics: MetricsSection = MetricsSection()


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
    workspace_roots: tuple[str, ...] = ()
    tasks_max: int = TASKS_MAX
    metrics_socket_setting: str | None = None
    metrics_port: int = 0
    max_runs_per_user: int = 4
    max_connections_per_user: int = 8
    request_timeout_s: float = 3.0

    @property
    def metrics_socket(self) -> Path | None:
        """`metrics.socket`, by default `metrics.sock` beside the daemon's socket (`--socket` too)."""
        if self.metrics_socket_setting is None:
            return self.socket_path.with_name("metrics.sock")
        return Path(self.metrics_socket_setting) if self.metrics_socket_setting else None

    @property
    def monitor(self) -> MonitorConfig:
        """The sensor's monitor: the shared task map split evenly between the concurrent runs."""
        return MonitorConfig(self.ringbuf_pages, tasks_max=self.tasks_max,
                             tasks_per_run=self.tasks_max // self.max_concurrent_runs)


def _gid(name: str, loc: tuple[str | int, ...]) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise PolicyError(loc, f"no group {name!r} on this host: create it (groupadd {name}) "
                               "or name an existing one") from None


def memory_bytes(value: int | str | None) -> int | None:
    """`limits.memory_max` (`4G`, `512M` or a byte count) as bytes; None for "max" (no limit)."""
    loc = ("limits", "memory_max")
    if value is None or value == "max":
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
    if doc.limits.max_runs_per_user is not None and doc.limits.max_runs_per_user < 1:
        raise PolicyError(("limits", "max_runs_per_user"), "expected at least 1")
    if not 1 <= doc.limits.max_connections_per_user <= MAX_CONNECTIONS_PER_USER:
        raise PolicyError(("limits", "max_connections_per_user"), f"expected 1 to {MAX_CONNECTIONS_PER_USER}")
    if not 0.5 <= doc.limits.request_timeout_s <= 60:
        raise PolicyError(("limits", "request_timeout_s"), "expected 0.5 to 60 seconds")
    pages = doc.sensor.ringbuf_pages
    if pages < 1 or pages & (pages - 1) or pages > MAX_RINGBUF_PAGES:
        raise PolicyError(("sensor", "ringbuf_pages"), f"expected a power of two up to {MAX_RINGBUF_PAGES}")
    if doc.metrics.socket and not doc.metrics.socket.startswith("/"):
        raise PolicyError(("metrics", "socket"), f"expected an absolute path, got {doc.metrics.socket!r}")
    if not 0 <= doc.metrics.port < 65536:
        raise PolicyError(("metrics", "port"), "expected a TCP port (1 to 65535), or 0 for none")
    if not MIN_TASKS_MAX <= doc.sensor.tasks_max <= MAX_TASKS_MAX:
        raise PolicyError(("sensor", "tasks_max"), f"expected {MIN_TASKS_MAX} to {MAX_TASKS_MAX}")
    if doc.limits.pids_max != "max" and doc.limits.pids_max < 1:
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
    for i, root in enumerate(doc.floor.workspace_roots):
        if not root.startswith("/") or any(part in ("", ".", "..") for part in root[1:].split("/")):
            raise PolicyError(("floor", "workspace_roots", i),
                              f"expected an absolute, normalized glob, got {root!r}")
    if doc.floor.policy is not None and not doc.floor.workspace_roots:
        raise PolicyError(("floor", "workspace_roots"), "a floor policy needs the directories callers may "
                          'run in, whose $WORKSPACE it grants (globs such as ["/home/*/work", "/srv/ci/*"])')


def _limits(section: LimitsSection) -> CgroupLimits:
    """Per-run limits: a host that cannot enforce the defaults runs without them (recorded in the
    run's health, as direct mode's); once the operator writes either limit, both are enforced or
    the run fails."""
    defaults = LimitsSection()
    chosen = (section.pids_max, section.memory_max) != (defaults.pids_max, defaults.memory_max)
    return CgroupLimits(pids_max=None if section.pids_max == "max" else section.pids_max,
                        memory_max=memory_bytes(section.memory_max), required=chosen)


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
        max_runs_per_user=doc.limits.max_runs_per_user or max(1, doc.limits.max_concurrent_runs // 2),
        max_connections_per_user=doc.limits.max_connections_per_user,
        request_timeout_s=doc.limits.request_timeout_s,
        limits=_limits(doc.limits),
        floor=floor,
        ringbuf_pages=doc.sensor.ringbuf_pages,
        ship=doc.ship,
        workspace_roots=doc.floor.workspace_roots,
        tasks_max=doc.sensor.tasks_max,
        metrics_socket_setting=doc.metrics.socket,
        metrics_port=doc.metrics.port,
    )


def _read(path: Path) -> str:
    try:
        return path.read_text("utf-8")
    except OSError as exc:
        raise RunnerError(f"cannot read the daemon config {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RunnerError(f"{path}: the daemon config is not UTF-8 text") from None
