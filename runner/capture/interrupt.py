"""SIGINT, SIGTERM and SIGHUP over a whole run: recorded, acted on at safe points, never half-done.

Installed for the whole of `session.execute`, from before the cgroup exists
until the archive is renamed into place, so no signal finds the runner
without a handler (before, a SIGTERM during the ~0.6 s of set-up killed it
and left its cgroup behind). What a signal does depends on the phase:

- `setup` (cgroup, monitor, spawn, spool header; the command has not been
  let go): set-up stops at its next step, everything made so far is undone
  (monitor detached, cgroup removed, partial spool deleted) and the runner
  exits 128+N with one line saying the command never started. There is no
  archive: nothing ran.
- `command` (the command runs): the drain loop ends the whole agent tree
  through `cgroup.kill`, drains what is left, and the archive is written
  with the health note `s2_run_ended: reason=<signal> phase=command`; the
  runner exits 128+N (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
  SIGINT counts whether it came from the terminal (the process group) or to
  the runner's pid alone.
- `publish` (the command has exited; final drain, normalize, archive): the
  capture is complete, so the first signal only says what is going on and
  the archive is finished; a second one abandons it: the temp file is
  removed, no archive appears, the spool is kept for `assay-runner
  normalize`, exit 128+N. The archive is a temp file renamed into place, so
  no signal can leave a half-written one.
- `done` (the archive is in place): there is nothing left to abandon, so
  a signal changes nothing. For `run`, whose process ends with the run
  (`final`), the handlers are not given back when the run returns: signals
  are ignored until the process exits, so a Ctrl-C while it prints its
  summary cannot turn a written archive into exit 130 (or a death by
  SIGINT) instead of the command's own code.

Handlers only record; nothing is raised inside a half-made step, except the
abandoning second signal of `publish`, whose temp file the archive writer
removes on the way out.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType, TracebackType
from typing import Literal

from runner.errors import RunnerError

Phase = Literal["setup", "command", "publish", "done"]
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def signal_exit_code(signum: int) -> int:
    """The documented exit code of a run ended by signal `signum`: 128+N, as a shell reports it."""
    return 128 + signum


def reason(signum: int) -> str:
    """The `s2_run_ended` reason for a signal: its name in lower case (`sigterm`)."""
    return signal.Signals(signum).name.lower()


SIGNAL_REASONS = {reason(s): s for s in HANDLED}


def run_exit_code(command_code: int, ended_by: str | None) -> int:
    """The runner's exit code: 128+N when signal N (or the daemon client's Ctrl-C) ended the run,
    else the command's own (a client that disconnected or a daemon shutdown keep the command's)."""
    signum = SIGNAL_REASONS.get(ended_by or "")
    return signal_exit_code(signum) if signum is not None else command_code


class Interrupted(RunnerError):
    """The run was interrupted where no archive can be written; exit 128+N."""

    def __init__(self, signum: int, phase: Phase, message: str) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name} during {phase}: {message}",
                         signal_exit_code(signum))
        self.signum = signum


class Interruptions:
    """The run's signal handlers and what they recorded (a context manager around the run).

    `forward_first` is for callers that promise the command a graceful end
    (`observe`: an agent past its timeout gets SIGTERM, then the kill): the
    first SIGTERM/SIGHUP of the command phase is forwarded to the command
    instead, and the next signal (or a SIGINT) kills the tree. The archive's
    note is the same.
    """

    def __init__(self, forward_first: bool = False, final: bool = False) -> None:
        self.forward_first = forward_first
        self.final = final
        self.phase: Phase = "setup"
        self.first: int | None = None
        """The first signal received, the one the run reports."""
        self.received = 0
        """Signals received in the current phase (`publish` counts afresh)."""
        self._taken = 0
        self._old: dict[int, object] = {}

    def __enter__(self) -> Interruptions:
        self._old = {s: signal.signal(s, self._on) for s in HANDLED}
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None,
                 _tb: TracebackType | None) -> None:
        keep_ignoring = self.final and self.phase == "done"
        for s, handler in self._old.items():
            # the old handler is None only when it was not set from Python
            signal.signal(s, signal.SIG_IGN if keep_ignoring else handler)  # type: ignore[arg-type]

    def _on(self, signum: int, _frame: FrameType | None) -> None:
        if self.phase == "done":  # the archive is in place: nothing to record or act on
            return
        self.received += 1
        if self.first is None:
            self.first = signum
        if self.phase != "publish":
            return
        if self.received == 1:
            print(f"assay-runner: {signal.Signals(signum).name}: the command has exited; finishing its "
                  "archive (signal again to abandon it, the spool is kept)", file=sys.stderr)
        elif self.received == 2:
            raise Interrupted(signum, "publish", "the archive was abandoned (nothing half-written); "
                              "the spool is kept: rebuild it with 'assay-runner normalize SPOOL'")

    def enter_publish(self) -> None:
        """The command has exited and its spool is complete: signals from now on only finish or abandon."""
        self.phase = "publish"
        self.received = 0

    def published(self) -> None:
        """The archive is in place: from now on a signal has nothing to act on."""
        self.phase = "done"

    def check_setup(self) -> None:
        """Between set-up steps: stop here if a signal came (the caller's `finally` undoes the rest)."""
        if self.first is not None:
            raise Interrupted(self.first, "setup", "the command never started; its cgroup and "
                              "programs were removed and nothing was written")

    def take(self) -> int | None:
        """In the drain loop: the first signal not acted on yet, if one came since the last call."""
        if self.first is None or self._taken >= self.received:
            return None
        self._taken = self.received
        return self.first
