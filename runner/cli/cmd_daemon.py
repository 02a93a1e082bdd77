"""`assay-runner daemon`: serve runs to unprivileged callers; `daemon status`: what it is doing."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import pwd
from pathlib import Path

import msgspec

from runner.display import printable
from runner.errors import RunnerError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "daemon",
        help="serve 'assay-runner run' to users of a group over a local socket (root)",
        description=(
            "Without an action (or 'serve'): run the daemon. It listens on a unix socket "
            "(default /run/assay-runner/runner.sock, mode 0660, group from the config) and runs "
            "each caller's command with the caller's own uid, groups, working directory and "
            "environment, writing the archive into the caller's --out. 'status': the active "
            "runs, BPF programs and memory of a running daemon. See docs/daemon.md."
        ),
    )
    p.add_argument("action", nargs="?", choices=("serve", "status"), default="serve")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="operator config (TOML; default /etc/assay-runner/daemon.toml if it exists)")
    p.add_argument("--socket", metavar="PATH",
                   help="socket path (overrides the config's socket.path; status: the daemon to ask)")
    p.add_argument("--json", action="store_true", help="status: print the reply as JSON")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.action == "status":
        return _status(args)
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    import dataclasses

    from runner.daemon.config import DEFAULT_CONFIG, load_config
    from runner.daemon.server import Daemon

    if os.geteuid() != 0:
        raise RunnerError("the daemon must run as root (it loads BPF programs and creates cgroups)")
    path = args.config if args.config is not None else (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None)
    config = load_config(path)
    if args.socket:
        config = dataclasses.replace(config, socket_path=Path(args.socket))
    return Daemon(config).serve()  # its sensor process checks the run prerequisites (they load BCC)


def _status(args: argparse.Namespace) -> int:
    from runner.daemon.client import daemon_status, socket_path

    reply = daemon_status(socket_path(args))
    if args.json:
        print(msgspec.json.encode(reply).decode())
        return 0
    print(f"daemon pid {reply.pid}, up {dt.timedelta(seconds=int(reply.uptime_s))}, "
          f"{len(reply.runs)}/{reply.max_concurrent_runs} runs, {reply.bpf_programs} BPF programs loaded, "
          f"{reply.rss_bytes / 2**20:.1f} MiB resident (daemon and run workers)")
    if reply.runs:
        print(f"{'RUN ID':<40} {'CALLER':<16} {'AGE':>8} {'EVENTS':>10} {'DROPS':>8}")
    for run in reply.runs:
        caller = _user(run.caller_uid)
        print(f"{run.run_id:<40} {caller:<16} {run.age_s:>7.1f}s {run.events:>10} {run.drops:>8}")
    if reply.ship_ref:
        print(f"shipping to {reply.ship_ref}: {reply.shipped} pushed, {len(reply.ship_queue)} waiting")
    for entry in reply.ship_queue:
        why = f" (attempt {entry.attempts}: {entry.last_error})" if entry.attempts else ""
        print(printable(f"  waiting {entry.run_id} {entry.path}{why}"))
    return 0


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
