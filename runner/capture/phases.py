"""The phases of a capture, against small interfaces so they run without root.

    run_started ▸ "go" ▸ drain every POLL_MS until the command exits
                ▸ command_exited ▸ final drain ▸ SDK messages ▸ run_finished

The session (session.py) provides the real pieces: the BCC monitor as the
`EventSource`, the spawned helper chain as the `Command`, the run's cgroup as
the `Group`. Tests provide a spool replay (`replay.ReplaySource`), child
processes of their own and a recording group, so the phase order, the final
drain and how signals and control requests end a run are checked without
BPF or root (tests/test_capture_phases.py).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from runner.capture.control import End, Interrupt, RunControl
from runner.capture.interrupt import Interruptions, reason
from runner.capture.spawn import FORWARDED
from runner.logs import get_logger
from spool.format import SdkMessage
from spool.writer import Spooler

POLL_MS = 20
HOLD_ENV = "ASSAY_RUNNER_HOLD_RING"
"""Test seam: set to 1, the drain loop does not read the ring while the command runs (a consumer
that is not draining), so any flood larger than the ring overflows it whatever the reader's
speed; the final drain after the command exits still runs. Drops stay counted and reported."""
log = get_logger("session")


class EventSource(Protocol):
    """The session↔monitor interface: what a capture needs from whatever produces raw records."""

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        """Where records go from now on, in ring order."""

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        """Block until records may be ready, `wake` is readable (the command ended) or the timeout passes."""

    def drain(self) -> None:
        """Hand every available record to the sink."""

    def finish(self) -> None:
        """The final drain, once the command is gone: every record written for the run so far."""

    def drops(self) -> dict[str, int]: ...

    def emitted(self) -> dict[str, int]: ...


@runtime_checkable
class BatchSource(Protocol):
    """A source that can also hand over records in encoded batches (the C consumer,
    ebpf/ringsink.py): `sink(items, count)` writes them as one spool Batch."""

    def set_batch_sink(self, sink: Callable[[bytes, int], None]) -> None: ...


class Command(Protocol):
    """The started command (spawn.Spawned): waiting for "go", then running."""

    helper_pid: int
    shim_pid: int
    exit_fd: int | None
    """Readable once the command is over (a pidfd), so the drain loop notices at once; None: polled."""

    def start(self) -> None: ...

    def poll(self) -> int | None: ...

    def signal(self, signum: int) -> None: ...


class Group(Protocol):
    """The run's processes as a whole (cgroup.RunCgroup)."""

    def kill(self) -> None: ...


class Messages(Protocol):
    """The SDK channel (sdk_server.SdkServer)."""

    def take_messages(self) -> list[SdkMessage]: ...

    def stop(self) -> None: ...


def capture(source: EventSource, spooler: Spooler, command: Command, group: Group, sdk: Messages,
            control: RunControl, on_start: Callable[[], None] | None = None,
            interrupts: Interruptions | None = None) -> tuple[int, str | None]:
    """Start the command and spool everything until it is over; its exit code and why it ended early.

    Records reach the spool from the moment the sink is set, before "go";
    after the command exits the source is drained once more, so nothing in
    flight is lost. `on_start` runs right before the command is let go. The
    caller writes the trailer.
    """
    source.set_sink(spooler.add)
    if isinstance(source, BatchSource):
        source.set_batch_sink(spooler.add_batch)
    if on_start is not None:
        on_start()
    spooler.phase("run_started")
    command.start()
    exit_code, ended_by = _drain_until_exit(source, spooler, command, group, sdk, control,
                                            interrupts or Interruptions())
    spooler.phase("command_exited")
    source.finish()
    sdk.stop()
    spooler.sdk(sdk.take_messages())
    spooler.phase("run_finished")
    return exit_code, ended_by


def _drain_until_exit(source: EventSource, spooler: Spooler, command: Command, group: Group, sdk: Messages,
                      control: RunControl, interrupts: Interruptions) -> tuple[int, str | None]:
    """Drain the ring buffer on a short timer until the command exits.

    Returns the exit code and, when the run was ended from outside (a
    signal to the runner, the daemon client's Ctrl-C or disconnect, the
    daemon shutting down), why. Any of those ends the whole agent tree at
    once through `cgroup.kill` (runner/capture/interrupt.py); the loop then
    drains until the command's exit is seen, so nothing in flight is lost.
    """
    ended_by: str | None = None
    forwarded = killed = False
    held = os.environ.get(HOLD_ENV) == "1"
    if held:
        log.warning("run.ring_held", reason=f"{HOLD_ENV}=1: the ring is read only after the command exits")
    try:
        while True:
            if held:
                time.sleep(POLL_MS / 1000)
            else:
                source.wait(POLL_MS, command.exit_fd)
                source.drain()
            spooler.flush()
            spooler.sdk(sdk.take_messages())
            code = command.poll()
            # Taken before acting on the exit: a terminal's Ctrl-C reaches the command's process
            # group too, and the command may die of it before this loop sees the signal.
            signum = interrupts.take()
            why = reason(signum) if signum is not None else _requested_end(control.requests())
            if why is not None and not killed:
                ended_by = ended_by or why
                if code is not None:
                    return code, ended_by  # already over: nothing left to end
                if signum in FORWARDED and interrupts.forward_first and not forwarded:
                    forwarded = True  # a graceful end was promised: the next signal kills
                    log.warning("run.forward", signal=signal.Signals(signum).name)
                    command.signal(signum)
                else:
                    killed = True
                    log.warning("run.end", reason=why, phase="command")
                    group.kill()
            if code is not None:
                return code, ended_by
            control.progress(spooler.records, source.drops)
    finally:
        control.done()


def _requested_end(requests: list[Interrupt | End]) -> str | None:
    """Why the control asks the run to end (the client's Ctrl-C counts as SIGINT), if it does."""
    for request in requests:
        return request.reason if isinstance(request, End) else reason(signal.SIGINT)
    return None
