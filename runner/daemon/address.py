"""The daemon's unix sockets: addresses that fit (runner/sockaddr.py), and listening sockets never
wider than meant."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from runner.errors import RunnerError
from runner.sockaddr import unix_address

if TYPE_CHECKING:
    from runner.daemon.config import DaemonConfig

BACKLOG = 256
"""Connections the kernel queues until the daemon's loop accepts them (it takes them all each time)."""

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
