"""The terminal's last row, kept for the live status line while the command runs.

The command writes to the same terminal as the runner, so the status line
must never be drawn where the command writes: a `\\r` redraw on the
command's row erases its partial lines (a prompt, pytest's progress dots).
As apt's progress bar does, the runner takes the last row out of the
scroll region (DECSTBM) and draws only there, with the cursor saved and
restored around each draw (DECSC/DECRC) and the attributes reset inside,
so the command's cursor, colour and bytes are untouched. It also tells the
kernel the terminal is one row shorter (TIOCSWINSZ), so full-screen
programs (`less`, `vim`) lay themselves out above the status row, and
their own scroll-region resets (`vim` sets `1;rows`) keep it. On resize
(SIGWINCH) the row moves to the new last row; on stop (SIGTSTP) the
terminal is given back whole and taken again on continue; `release`
gives it back at the end, after any signal that ended the run.

Where the terminal cannot do this (not a terminal, `TERM` unset or
`dumb`, fewer than MIN_ROWS rows) there is no live line at all.
Known limit: a program that saves the cursor with DECSC and restores it
more than a redraw later finds our position, as there is one save slot.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import termios
import threading
from types import FrameType

MIN_ROWS = 4
MIN_COLS = 20

SAVE, RESTORE = "\0337", "\0338"


def _size(fd: int) -> tuple[int, int]:
    """(rows, columns) the kernel holds for the terminal on `fd`, or (0, 0)."""
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8)))
    except OSError:
        return 0, 0
    return rows, cols


def _set_rows(fd: int, rows: int, cols: int) -> None:
    with contextlib.suppress(OSError):  # the kernel kept the size: the scroll region still protects the row
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def capable(fd: int) -> bool:
    """Whether the status row can be kept on `fd`: a terminal that knows cursor addressing, big enough."""
    if not os.isatty(fd) or os.environ.get("TERM", "dumb") in ("", "dumb"):
        return False
    rows, cols = _size(fd)
    return rows >= MIN_ROWS and cols >= MIN_COLS


class StatusRow:
    """The reserved last row: taken at the first `draw`, given back by `release` (idempotent)."""

    def __init__(self, fd: int = 2) -> None:
        self._fd = fd
        self.enabled = capable(fd)
        self._rows = self._cols = 0  # the terminal's real size while the row is taken, else 0
        self._resized = False
        self._text = ""
        self._old: dict[int, object] = {}

    def draw(self, text: str) -> None:
        """Show `text` on the status row (taking the row first if needed)."""
        if not self.enabled:
            return
        self._text = text
        if not self._rows:
            self._take()
        elif self._resized:
            self._resize()
        if self._rows:
            self._write(self._line())

    def release(self) -> None:
        """Give the row back: blank it, full scroll region, the kernel's size as it was."""
        if self._rows:
            self._give_back()
        for signum, handler in self._old.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]  # None only for a non-Python handler
        self._old = {}

    def _line(self) -> str:
        """Save the cursor, draw on the last row in default attributes, restore the cursor."""
        return f"{SAVE}\033[{self._rows};1H\033[0m\033[2K{self._text[:self._cols - 1]}{RESTORE}"

    def _take(self) -> None:
        rows, cols = _size(self._fd)
        if rows < MIN_ROWS or cols < MIN_COLS:
            return
        if not self._old and threading.current_thread() is threading.main_thread():  # where Python allows it
            self._old = {signal.SIGWINCH: signal.signal(signal.SIGWINCH, self._on_winch),
                         signal.SIGTSTP: signal.signal(signal.SIGTSTP, self._on_tstp)}
        self._rows, self._cols, self._resized = rows, cols, False
        # IND moves down one keeping the column (scrolling the screen when on the last row), CUU
        # comes back to the same line of text, now above the last row; setting the region homes the
        # cursor, restore puts it back (inside the region: no emulator clamps it).
        self._write(f"\033D\033[1A{SAVE}\033[1;{rows - 1}r{RESTORE}")
        _set_rows(self._fd, rows - 1, cols)

    def _give_back(self) -> None:
        rows, cols = self._rows, self._cols
        self._rows = 0
        _set_rows(self._fd, rows, cols)
        self._write(f"{SAVE}\033[r\033[{rows};1H\033[0m\033[2K{RESTORE}")

    def _resize(self) -> None:
        """A real resize (not our own TIOCSWINSZ): the row moves to the new last row."""
        self._resized = False
        rows, cols = _size(self._fd)
        if (rows, cols) == (self._rows - 1, self._cols):
            return  # our own change
        self._write(f"{SAVE}\033[r\033[{self._rows};1H\033[2K{RESTORE}")
        self._rows = 0
        self._take()

    def _on_winch(self, _signum: int, _frame: FrameType | None) -> None:
        self._resized = True  # acted on at the next draw, outside the handler

    def _on_tstp(self, _signum: int, _frame: FrameType | None) -> None:
        """Ctrl-Z: the shell gets the whole terminal; the row is taken again at the next draw."""
        if self._rows:
            self._give_back()
        os.kill(os.getpid(), signal.SIGSTOP)

    def _write(self, data: str) -> None:
        """One write(2): the command's writes to the terminal never land inside our sequence."""
        try:
            os.write(self._fd, data.encode())
        except OSError:
            self.enabled = False  # the terminal went away: nothing more to draw
