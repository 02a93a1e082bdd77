"""How the person (or program) who started a run sees it and steers it.

Direct mode draws the live status line on the runner's own terminal and
takes no requests: its signals are the runner's own (interrupt.py).
The daemon's run worker implements the same interface over the client's
socket: progress goes to the client, which draws the same line, and the
client's Ctrl-C or disconnect, or the daemon's shutdown, come back as
requests the session acts on in its drain loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

import msgspec

from runner.capture.status import LiveStatus

EndReason = Literal["client_disconnected", "daemon_shutdown"]


class Interrupt(msgspec.Struct, frozen=True):
    """The client's Ctrl-C: ends the run as SIGINT to the runner does in direct mode (reason `sigint`)."""


class End(msgspec.Struct, frozen=True):
    """Kill the run now (cgroup.kill); `reason` becomes a health note of the archive."""

    reason: EndReason


class RunControl(Protocol):
    def progress(self, events: int, drops: Callable[[], dict[str, int]]) -> None:
        """Called on every drain; rate-limit as needed."""

    def requests(self) -> list[Interrupt | End]:
        """What was asked since the last call (never blocks)."""

    def done(self) -> None:
        """The command has exited: take the status line down."""


class TerminalControl:
    """Direct mode: the status line on our stderr, no requests."""

    def __init__(self) -> None:
        self._status = LiveStatus()

    def progress(self, events: int, drops: Callable[[], dict[str, int]]) -> None:
        self._status.update(events, drops)

    def requests(self) -> list[Interrupt | End]:
        return []

    def done(self) -> None:
        self._status.clear()
