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

import contextlib
import os
import signal
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from runner.capture.control import End, Interrupt, RunControl
from runner.logs import get_logger
from spool.format import SdkMessage
from spool.writer import Spooler

POLL_MS = 20
log = get_logger("session")


class EventSource(Protocol):
    """The session↔monitor interface: what a capture needs from whatever produces raw records."""

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        """Where records go from now on, in ring order."""

    def wait(self, timeout_ms: int) -> None:
        """Block until records may be ready or the timeout passes."""

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

    def start(self) -> None: ...

    def poll(self) -> int | None: ...

    def signal(self, signum: int) -> None: ...


class Group(Protocol):
    """The run's processes as a whole (cgroup.RunCgroup)."""

    def pids(self) -> list[int]: ...

    def kill(self) -> None: ...


class Messages(Protocol):
    """The SDK channel (sdk_server.SdkServer)."""

    def take_messages(self) -> list[SdkMessage]: ...

    def stop(self) -> None: ...


class _Signals:
    """Turns SIGTERM/SIGHUP into flags the drain loop acts on.

    SIGINT from the terminal already reaches the command (same process
    group); the runner ignores it and keeps draining until the command exits.
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self._old = {s: signal.signal(s, self._on) for s in (signal.SIGTERM, signal.SIGHUP)}
        self._old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _on(self, signum: int, _frame: object) -> None:
        self.pending.append(signum)

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


def capture(source: EventSource, spooler: Spooler, command: Command, group: Group, sdk: Messages,
            control: RunControl, on_start: Callable[[], None] | None = None) -> tuple[int, str | None]:
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
    exit_code, ended_by = _drain_until_exit(source, spooler, command, group, sdk, control)
    spooler.phase("command_exited")
    source.finish()
    sdk.stop()
    spooler.sdk(sdk.take_messages())
    spooler.phase("run_finished")
    return exit_code, ended_by


def _drain_until_exit(source: EventSource, spooler: Spooler, command: Command, group: Group,
                      sdk: Messages, control: RunControl) -> tuple[int, str | None]:
    """Drain the ring buffer on a short timer until the command exits.

    Returns the exit code and, when the run was ended from outside (client
    gone, daemon shutting down), why.
    """
    signals = _Signals()
    terms = 0
    ended_by: str | None = None
    try:
        while True:
            source.wait(POLL_MS)
            source.drain()
            spooler.flush()
            spooler.sdk(sdk.take_messages())
            code = command.poll()
            if code is not None:
                return code, ended_by
            for request in control.requests():
                if isinstance(request, End) or (isinstance(request, Interrupt) and terms):
                    ended_by = request.reason if isinstance(request, End) else ended_by
                    log.warning("run.end", reason=ended_by or "second_interrupt")
                    group.kill()
                else:
                    terms += 1
                    _interrupt(group, command)
            while signals.pending:
                signum = signals.pending.pop()
                terms += 1
                log.warning("run.signal", signal=signal.Signals(signum).name, count=terms)
                if terms > 1:
                    group.kill()
                else:
                    command.signal(signum)
            control.progress(spooler.records, source.drops)
    finally:
        control.done()
        signals.restore()


def _interrupt(group: Group, command: Command) -> None:
    """SIGINT to every process of the command, as a terminal's Ctrl-C reaches its process group."""
    for pid in group.pids():
        if pid not in (command.helper_pid, command.shim_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
