"""The daemon's unix sockets: addresses that fit, and listening sockets never wider than meant.

A socket path as a unix socket address: one too long to be an address is a one-line error.

`sockaddr_un.sun_path` holds 108 bytes, NUL included. Python refuses a longer path before
any syscall, with an OSError that has no errno ("AF_UNIX path too long"),
which would reach the user as a traceback from `bind` or `connect`. The
daemon's socket is a path the operator or the caller chose (`socket.path`,
`--socket`, `ASSAY_RUNNER_SOCKET`), so it is checked where it is used.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from runner.errors import RunnerError

if TYPE_CHECKING:
    from runner.daemon.config import DaemonConfig

BACKLOG = 256
"""Connections the kernel queues until the daemon's loop accepts them (it takes them all each time)."""

SUN_PATH_MAX = 107
"""The longest pathname a unix socket address holds: `sockaddr_un.sun_path` is 108 bytes, and
Python keeps one for the terminating NUL (the kernel would take 108 without it; Python refuses)."""


def unix_address(path: Path, where: str) -> str:
    """`path` as an address for bind/connect; RunnerError naming `where` it came from when too long."""
    size = len(os.fsencode(path))
    if size > SUN_PATH_MAX:
        raise RunnerError(f"the socket path {path} ({where}) is {size} bytes long, and a unix socket path "
                          f"holds at most {SUN_PATH_MAX}: choose a shorter one")
    return str(path)


def listen(config: DaemonConfig) -> tuple[socket.socket, bool]:
    """The listening socket and whether we made it: systemd's (socket activation) or bound here.

    Ours is 0660 root:`socket.group` and never wider, not even for a moment;
    with socket activation the socket unit's path, mode and group apply.
    """
    if os.environ.get("LISTEN_PID") == str(os.getpid()) and os.environ.get("LISTEN_FDS") == "1":
        sock = socket.socket(fileno=3)
        sock.setblocking(False)
        return sock, False
    gid = config.socket_gid if config.socket_gid is not None else 0
    return bind_unix(config.socket_path, "socket.path or --socket", 0o660, gid), True


def bind_unix(path: Path, where: str, mode: int, gid: int) -> socket.socket:
    """A non-blocking socket listening at `path`, root:`gid` `mode` (created 0600, never wider)."""
    address = unix_address(path, where)
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    _remove_stale(path, where)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # never a moment with wider permissions than 0600
    try:
        sock.bind(address)
    finally:
        os.umask(old)
    os.chown(path, 0, gid)
    os.chmod(path, mode)
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def _remove_stale(path: Path, where: str) -> None:
    """A socket left by a daemon that died is removed; a live daemon or any other file is an error."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise RunnerError(f"{path} exists and is not a socket: remove it or choose another {where}")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        path.unlink()
        return
    finally:
        probe.close()
    raise RunnerError(f"another daemon is already listening on {path}")


def metrics_listeners(config: DaemonConfig) -> list[socket.socket]:
    """The metrics endpoint's sockets: `metrics.socket` (root-only, 0600) and `metrics.port` on
    127.0.0.1, each when configured (runner/daemon/metrics.py)."""
    out = []
    if config.metrics_socket is not None:
        out.append(bind_unix(config.metrics_socket, "metrics.socket", 0o600, 0))
    if config.metrics_port:
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind(("127.0.0.1", config.metrics_port))
        except OSError as exc:
            tcp.close()
            raise RunnerError(f"metrics.port {config.metrics_port}: cannot listen on 127.0.0.1: "
                              f"{exc.strerror}") from None
        tcp.listen(BACKLOG)
        tcp.setblocking(False)
        out.append(tcp)
    return out
