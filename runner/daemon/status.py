"""`daemon status`: the reply the main loop sends, built from what it knows and what /proc says.

Kept apart from the main loop (server.py) because none of it changes the
daemon's state: it reads the runs, the processes' BPF programs and memory,
the metrics and the shipping queue, and encodes them.
"""

from __future__ import annotations

import contextlib
import os

from runner.daemon import protocol
from runner.daemon.config import DaemonConfig
from runner.ship.queue import Shipper


def status_reply(uptime_s: float, runs: list[protocol.RunInfo], pids: list[int], config: DaemonConfig,
                 metrics: dict[str, float], shipper: Shipper | None) -> protocol.StatusReply:
    """The reply; `pids` are the daemon's, the sensor's and the run workers' (their BPF programs and
    resident memory are counted)."""
    return protocol.StatusReply(
        version=protocol.VERSION, pid=os.getpid(), uptime_s=round(uptime_s, 3),
        runs=runs,
        bpf_programs=len(set().union(*map(_bpf_programs, pids))), rss_bytes=sum(map(_rss_bytes, pids)),
        max_concurrent_runs=config.max_concurrent_runs, metrics=metrics,
        ship_ref=config.ship.ref,
        ship_queue=[protocol.ShipInfo(p.run_id, p.path, p.attempts, p.last_error)
                    for p in (shipper.pending() if shipper else [])],
        shipped=shipper.pushed if shipper else 0,
    )


def _bpf_programs(pid: int) -> set[int]:
    """Ids of the BPF programs `pid` holds fds of (workers share the daemon's: counted once)."""
    ids: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(f"/proc/{pid}/fdinfo"):
            with contextlib.suppress(OSError), open(entry.path) as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
    return ids


def _rss_bytes(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
