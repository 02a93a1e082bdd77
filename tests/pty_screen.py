"""A command run on a pseudo-terminal of a known size, its output rendered by a terminal emulator (pyte).

The tests of the live status row (runner/capture/terminal.py) assert on the
screen a user would see, not on escape sequences: the byte stream is fed to
pyte as it arrives, and every intermediate screen is kept, so a test can ask
whether a line was ever erased while the command ran.
"""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyte

ROWS, COLS = 24, 80


@dataclass
class Session:
    """What the terminal showed: every screen after each chunk, the final one, the raw bytes."""

    code: int
    data: bytes
    screens: list[list[str]] = field(default_factory=list)
    final: pyte.Screen | None = None
    rows_after: int = 0

    @property
    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screens[-1]]


def _controlling(follower: int) -> Callable[[], None]:
    def setup() -> None:
        os.setsid()
        fcntl.ioctl(follower, termios.TIOCSCTTY, 0)
    return setup


Action = bytes | tuple[int, int] | None
"""What a test does on seeing a screen: type bytes, resize the terminal to (rows, cols), or nothing."""


def run(argv: list[str], cwd: Path, env: dict[str, str],
        keys: Callable[[list[str]], Action] | None = None, timeout: float = 120) -> Session:
    """Run `argv` with a new session whose controlling terminal is a ROWSxCOLS pty; `keys` sees each new
    screen and says what to do (a resize is the kernel's: SIGWINCH to the foreground group)."""
    leader, follower = os.openpty()
    fcntl.ioctl(leader, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=follower, stdout=follower, stderr=follower,
                            preexec_fn=_controlling(follower))
    os.close(follower)
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    session = Session(0, b"")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.05)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every holder of the follower is gone
            break
        if not chunk:
            break
        session.data += chunk
        stream.feed(chunk)
        session.screens.append(list(screen.display))
        action = keys(session.screens[-1]) if keys is not None else None
        if isinstance(action, bytes):
            os.write(leader, action)
        elif action is not None:
            screen.resize(*action)
            fcntl.ioctl(leader, termios.TIOCSWINSZ, struct.pack("HHHH", *action, 0, 0))
    session.rows_after = struct.unpack("HHHH", fcntl.ioctl(leader, termios.TIOCGWINSZ, bytes(8)))[0]
    os.close(leader)
    session.code = proc.wait(timeout=30)
    session.final = screen
    return session
