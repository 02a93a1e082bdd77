"""A small process that ends the run's command the moment its runner dies, by any signal.

Without it, a runner killed with SIGKILL took its command down only seconds
later: the runner held the last references to the monitor's tracepoint
attachments, and the kernel closes a dead process's files (one RCU grace
period per attachment, about 70 ms each) before it tells the children
(`PR_SET_PDEATHSIG` of the helper chain, runner/capture/spawn.py), so the
command ran on, unobserved, for that whole time.

The warden is forked once the run's monitor is attached, before the
command exists. It keeps only what makes the runner's own exit quick (the
BPF and perf descriptors: with it holding references, the runner's closes
only drop them) and a pidfd of the runner; everything else is closed, so it
holds neither `--out` nor the spool nor the caller's terminal. When the
runner ends without releasing it (`release`), it writes `cgroup.kill` of the
run's cgroup (every task of the run, whatever its pid namespace), records
the time of the death for the later recovery (owner.py, `record_death`) and
exits, releasing the attachments in its own time. A released warden just
exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from pathlib import Path

from ebpf.holder import keep_only_kernel_objects
from runner.capture.cgroup import RunCgroup
from runner.capture.owner import record_death
from runner.errors import RunnerError


class Warden:
    """The runner's side: the pid of the warden and the pipe that releases it."""

    def __init__(self, cgroup: Path, record: Path | None) -> None:
        """Fork the warden (detached: its own session, reparented) for the run cgroup `cgroup`."""
        release_r, self._release = os.pipe()
        pidfd = os.pidfd_open(os.getpid())
        try:
            child = os.fork()
        except OSError as exc:
            for fd in (release_r, self._release, pidfd):
                os.close(fd)
            raise RunnerError(f"cannot start the run's warden: {exc.strerror}") from exc
        if child == 0:  # pragma: no cover - runs in the child
            try:  # detached: a released warden's exit takes its time, no one waits for it
                os.close(self._release)
                os.setsid()
                if os.fork() == 0:
                    _watch(pidfd, release_r, cgroup, record)
            finally:
                os._exit(0)
        os.close(release_r)
        os.close(pidfd)
        os.waitpid(child, 0)

    def release(self) -> None:
        """The run ended in order: the warden exits without touching the cgroup (safe twice)."""
        if self._release < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._release, b"r")
        os.close(self._release)
        self._release = -1


def _watch(pidfd: int, release_r: int, cgroup: Path, record: Path | None) -> None:  # pragma: no cover
    """In the warden: wait for the runner's end (its pidfd) or its release; on an end without
    release, kill the run's cgroup and record the death."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_IGN)  # its own session: only a deliberate signal reaches it
    keep_only_kernel_objects((release_r, pidfd))
    os.set_blocking(release_r, False)  # the command's helper chain holds the write end too
    waiting = select.poll()  # not select(): the runner's descriptors may number past FD_SETSIZE
    for fd in (pidfd, release_r):
        waiting.register(fd, select.POLLIN)
    waiting.poll()
    with contextlib.suppress(OSError):
        if os.read(release_r, 1) == b"r":
            return
    with contextlib.suppress(OSError, RunnerError):
        RunCgroup(path=cgroup, id=0, level=0).kill()
    if record is not None:
        record_death(record)
