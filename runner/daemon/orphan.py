"""A run whose daemon worker was killed still reaches its caller.

The worker stages the run's evidence in `<staging>/<run id>.<worker pid>.*/`
(runner/daemon/staging.py) and delivers it when the run ends; killed, it
delivers nothing. The command dies with it (the helper chain's
PR_SET_PDEATHSIG: the worker holds nothing whose release is slow, the
monitor is the sensor's). The daemon, which keeps the caller's `--out`
descriptor and a copy of its connection for each live run, then:

1. records the death beside the run's owner record (owner.py), so the
   rebuilt archive names the interval nobody observed;
2. sweeps (runner/capture/stale.py): the run's cgroup is removed and its
   spool rebuilt, in the staging directory, into an archive marked partial;
3. delivers what the staging directory holds into the caller's `--out`
   through that descriptor, as the caller (`staging.deliver`), and removes
   the staging directory;
4. tells the caller, on its connection, what happened and what it got.

Staging directories whose worker is gone and that no live run will deliver
(the daemon itself died) are removed when the daemon starts, after its
sweep, and the log names what was in them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from runner.capture.cgroup import parent_name
from runner.capture.owner import read_record, record_death, records_dir, start_time
from runner.capture.spawn import Credentials
from runner.capture.stale import sweep
from runner.daemon import protocol
from runner.daemon.staging import STAGING, deliver
from runner.errors import RunnerError
from runner.logs import get_logger

log = get_logger("daemon")


@dataclass
class Held:
    """What the daemon keeps of a live run to reach its caller if the worker dies."""

    out_fd: int
    conn: socket.socket
    out_display: str
    creds: Credentials | None = None
    """The command's credentials, None when the request named no usable user (the worker refuses it)."""

    def let_go(self) -> None:
        """The worker delivered: the caller's `--out` is released (so `run` returns with nothing of
        ours holding it); a later death of the worker has nothing left to deliver."""
        if self.out_fd >= 0:
            os.close(self.out_fd)
            self.out_fd = -1

    def close(self) -> None:
        self.let_go()
        self.conn.close()


def mark_death(worker_pid: int) -> None:
    """Beside the record of every run cgroup the dead worker owned: when it died (about now)."""
    with contextlib.suppress(RunnerError, OSError):
        directory = records_dir(parent_name(), create=False)
        for entry in os.scandir(directory):
            if entry.name.isdigit() and (owner := read_record(Path(entry.path))) and owner.pid == worker_pid:
                record_death(Path(entry.path))


def recover_killed(run_id: str, worker_pid: int, status: int, held: Held) -> list[str]:
    """Sweep, deliver what the killed worker staged, tell the caller; the lines said (logged too)."""
    mark_death(worker_pid)
    lines = sweep()
    delivered: list[str] = []
    for staging in sorted(STAGING.glob(f"{run_id}.{worker_pid}.*")):
        try:
            if held.creds is not None and held.out_fd >= 0:
                delivered += deliver(staging, run_id, held.out_fd, held.creds)
        except RunnerError as exc:
            lines.append(f"cannot deliver {staging}: {exc}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    how = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else f"status {status}"
    if delivered:
        got = ", ".join(os.path.join(held.out_display, n) for n in delivered) + " (marked partial: " \
            "s2_run_recovered)"
    elif held.out_fd < 0:
        got = f"nothing more: the run's evidence had reached {held.out_display} before"
    else:
        got = "nothing: no evidence could be rebuilt (see the daemon's log)"
    message = (f"the daemon's worker for run {run_id} was killed ({how}); the command was killed with it; "
               f"delivered: {got}")
    lines.append(message)
    for line in lines:
        log.warning("run.worker_killed", run_id=run_id, worker=worker_pid, what=line)
    with contextlib.suppress(OSError):
        held.conn.settimeout(5)
        held.conn.sendall(protocol.encode(protocol.refused(message)))
    return lines


def remove_leftovers(root: Path = STAGING) -> list[str]:
    """Remove staging directories whose worker is gone (the daemon starts: no one will deliver them)."""
    removed = []
    with contextlib.suppress(OSError):
        for path in sorted(root.iterdir()):
            parts = path.name.rsplit(".", 2)
            pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
            if pid is None or start_time(pid) is not None:
                continue  # not a worker's of this version, or a live worker's (another daemon's)
            names = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"removed the staging directory {path} of a worker that is gone "
                           f"(it held: {', '.join(names) or 'nothing'})")
    for line in removed:
        log.warning("daemon.staging_leftover", what=line)
    return removed
