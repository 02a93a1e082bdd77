"""A scripted stand-in daemon and the two clients (Python CLI, fast C client) to run against it."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runner.daemon import protocol
from tests import sanitized

ROOT = Path(__file__).resolve().parents[1]
FAST = sanitized.FAST_CLIENT
PYTHON_CLI = [sys.executable, "-m", "runner.cli.main"]
SOURCE = ROOT / "runner" / "daemon" / "fastclient.c"


def fast_binary() -> str:
    with FAST.open("rb") as f:
        assert f.read(4) == b"\x7fELF", f"{FAST} is not the fast client: run make setup"
    assert FAST.stat().st_mtime >= SOURCE.stat().st_mtime, f"{FAST} is older than {SOURCE}: run make setup"
    return str(FAST)


CLIENTS = {"python": lambda: PYTHON_CLI, "fast": lambda: [fast_binary()]}


@dataclass
class Seen:
    request: protocol.RunStart | None = None
    fds: list[os.stat_result] = field(default_factory=list)
    later: list[object] = field(default_factory=list)
    connections: int = 0


Script = Callable[[socket.socket, Seen], None]


def finished(code: int, text: str = "assay-runner: command exited 0 after 0.01s\n  archive: x") -> Script:
    def reply(conn: socket.socket, _seen: Seen) -> None:
        protocol.send(conn, protocol.Started(run_id="x"))
        protocol.send(conn, protocol.Finished(exit_code=code, summary=text))
    return reply


class FakeDaemon:
    """A unix socket that takes one run request per connection and answers with `script`."""

    def __init__(self, script: Script) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fastclient-", dir="/tmp"))
        self.socket = self.dir / "runner.sock"
        self.script = script
        self.seen: list[Seen] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket))
        self._listener.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                seen = Seen()
                self.seen.append(seen)
                reader = protocol.FrameReader()
                body = protocol.receive(conn, reader)
                if body is None:
                    continue  # a client that connected and went away (the fast client's fallback may)
                # a run start is all a client sends first: anything else fails the test's checks on it
                seen.request = protocol.decode_client(body)  # type: ignore[assignment]
                for fd in reader.take_fds():
                    seen.fds.append(os.fstat(fd))
                    os.close(fd)
                self.script(conn, seen)

    def close(self) -> None:
        self._listener.close()
        for p in self.dir.iterdir():
            p.unlink()
        self.dir.rmdir()


@pytest.fixture
def daemon_factory() -> Iterator[Callable[[Script], FakeDaemon]]:
    made: list[FakeDaemon] = []

    def make(script: Script) -> FakeDaemon:
        made.append(FakeDaemon(script))
        return made[-1]
    yield make
    for d in made:
        d.close()


def run_client(client: str, args: list[str], cwd: Path, env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLIENTS[client](), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env=env if env is not None else {**os.environ}, stdin=subprocess.DEVNULL)


SEND_SYSCALLS = {"x86_64": {44, 46}, "aarch64": {206, 211}}
"""sendto and sendmsg: what /proc/PID/syscall shows while the client is blocked sending its request."""


def blocked_sending(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    return bool(fields) and fields[0].isdigit() and int(fields[0]) in SEND_SYSCALLS[platform.machine()]
