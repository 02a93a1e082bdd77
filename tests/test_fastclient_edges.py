"""The fast client (runner/daemon/fastclient.c) at its edges: short memory, long paths, lost races,
replies of the wrong type, and a Ctrl-C while the request is still going out.

Each case drives the real binary (the sanitized one under `make test-asan`)
against a stand-in daemon. Where the edge cannot be reached by arguments
alone, a small preloaded library puts the process on it deterministically:
one `malloc` of a chosen size fails, or a directory appears just before the
client's own `mkdir` of it (a concurrent run that won the race).
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from runner.daemon import protocol
from tests.fastclient_support import CLIENTS, Script, blocked_sending, daemon_factory, finished, run_client

__all__ = ["daemon_factory"]  # the fixture, from tests/fastclient_support.py

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Only in the process whose executable is SHIM_EXE (not the Python CLI it may hand over to). */
static int targeted(void)
{
    static int answer = -1;
    if (answer < 0) {
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        const char *want = getenv("SHIM_EXE");
        exe[n > 0 ? n : 0] = 0;
        answer = want && strcmp(exe, want) == 0;
    }
    return answer;
}

void *malloc(size_t size)
{
    static void *(*real)(size_t);
    if (!real)
        real = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    const char *fail = getenv("SHIM_FAIL_MALLOC");
    if (fail && (size_t)atol(fail) == size && targeted())
        return NULL;
    return real(size);
}

int mkdir(const char *path, mode_t mode)
{
    static int (*real)(const char *, mode_t);
    if (!real)
        real = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    const char *race = getenv("SHIM_RACE_MKDIR");
    if (race && strcmp(race, path) == 0)
        real(path, 0700); /* the concurrent run that got there first */
    return real(path, mode);
}
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = tmp_path_factory.mktemp("shim")
    (build / "shim.c").write_text(SHIM)
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(build / "shim.so"),
                    str(build / "shim.c"), "-ldl"], check=True, capture_output=True, timeout=120)
    return build / "shim.so"


def shimmed(shim: Path, **settings: str) -> dict[str, str]:
    """The environment with the shim preloaded, aimed at the fast client, and `settings` (SHIM_*)."""
    env = {**os.environ, "LD_PRELOAD": str(shim), "SHIM_EXE": str(CLIENTS["fast"]()[0]), **settings}
    # a sanitized fast client (make test-asan) takes a library preloaded before its runtime
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
    return env


def test_an_allocation_that_fails_hands_over_to_the_python_cli(tmp_path: Path, shim: Path,
                                                              daemon_factory: Callable) -> None:
    """--out's resolved path is allocated with a size no other allocation before it has: it fails,
    and the client must not write through NULL but hand over, and the run goes ahead as the Python CLI's."""
    out = tmp_path
    while len(str(out)) < 777:
        out /= "o" * min(200, 777 - len(str(out)) - 1)
    assert len(str(out)) == 777
    fake = daemon_factory(finished(0))
    proc = run_client("fast", ["run", "--socket", str(fake.socket), "--out", str(out), "--run-id", "mem",
                               "--", "/bin/true"], tmp_path, shimmed(shim, SHIM_FAIL_MALLOC=str(777 + 2)))
    assert proc.returncode == 0, proc.stderr
    assert len(fake.seen) >= 1 and fake.seen[-1].request is not None
    assert fake.seen[-1].request.out_display == str(out)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_an_out_path_too_long_for_its_files_is_one_line_and_nothing_is_sent(
        tmp_path: Path, client: str, daemon_factory: Callable) -> None:
    """--out fits in PATH_MAX, its write check and archive names do not: the client must not
    check (and send) a truncated name."""
    out = tmp_path
    while len(str(out)) < 4080:  # PATH_MAX is 4096 with the NUL; a write check name is 32 more
        out /= "d" * min(200, 4080 - len(str(out)) - 1)
    assert len(str(out)) == 4080
    fake = daemon_factory(finished(0))
    proc = run_client(client, ["run", "--socket", str(fake.socket), "--out", str(out), "--run-id", "long",
                               "--", "/bin/true"], tmp_path)
    assert proc.returncode == 125, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("assay-runner: error: ") and "too long" in lines[0], lines
    assert all(s.request is None for s in fake.seen)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_directory_made_by_a_concurrent_run_keeps_its_mode(tmp_path: Path, client: str, shim: Path,
                                                            daemon_factory: Callable) -> None:
    """The parent of --out appears (0700, someone else's) between the client's look and its mkdir:
    the client makes what is still missing and leaves that directory as it found it."""
    raced = tmp_path / "shared"
    out = raced / "runs"
    fake = daemon_factory(finished(0))
    env = shimmed(shim, SHIM_RACE_MKDIR=str(raced))
    env["SHIM_EXE"] = str(Path(CLIENTS[client]()[0]).resolve())
    proc = run_client(client, ["run", "--socket", str(fake.socket), "--out", str(out), "--run-id", "race",
                               "--", "/bin/true"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert fake.seen[-1].request is not None
    assert (raced.stat().st_mode & 0o777, out.stat().st_mode & 0o777) == (0o700, 0o755)


def frame(message: dict[str, object]) -> bytes:
    body = msgspec.msgpack.encode(message)
    return struct.pack(">I", len(body)) + body


def raw_replies(*messages: dict[str, object]) -> Script:
    """Replies written as given, field order and types included (not through protocol's structs)."""
    def reply(conn: socket.socket, _seen: object) -> None:
        for m in messages:
            try:
                conn.sendall(frame(m))
            except (BrokenPipeError, ConnectionResetError):
                return  # the client hung up on a bad reply, as it should: the rest has no reader
    return reply


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("replies", [
    [{"type": "finished", "elapsed_s": 3, "exit_code": "0", "summary": "done"}],
    [{"type": "progress", "events": "many", "drops": 0, "elapsed_s": 0.5},
     {"type": "finished", "exit_code": 0, "summary": "done"}],
    [{"type": "finished", "exit_code": 0, "summary": 7}],
    [{"type": "refused", "exit_code": 2.5, "message": "no"}],
], ids=["exit-code-str", "events-str", "summary-int", "exit-code-float"])
def test_a_reply_field_of_the_wrong_type_is_a_protocol_error(tmp_path: Path, client: str,
                                                            replies: list[dict[str, object]],
                                                            daemon_factory: Callable) -> None:
    fake = daemon_factory(raw_replies({"type": "started", "run_id": "x"}, *replies))
    proc = run_client(client, ["run", "--socket", str(fake.socket), "--out", "out", "--run-id", "typed",
                               "--", "/bin/true"], tmp_path)
    assert proc.returncode == 125, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("assay-runner: error: bad reply from the daemon"), lines


class SlowReader:
    """A daemon that lets the client's request fill the socket, and reads it only when told."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fastclient-edge-", dir="/tmp"))
        self.socket = self.dir / "runner.sock"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.socket))
        self.listener.listen(1)
        self.after_request: list[object] = []
        self.go = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:  # closed before the client connected
            return
        with conn:
            self.go.wait(60)
            reader = protocol.FrameReader()
            request = protocol.receive(conn, reader)
            for fd in reader.take_fds():  # the client's stdio among them: closed even from a cut request
                os.close(fd)
            if request is None:
                return
            conn.settimeout(30)
            try:
                body = protocol.receive(conn, reader)
            except OSError:
                body = None
            self.after_request.append(None if body is None else protocol.decode_client(body))
            if body is not None:
                protocol.send(conn, protocol.Finished(exit_code=130, summary="interrupted"))

    def close(self) -> None:
        self.go.set()
        self.listener.close()
        self.thread.join(30)
        for p in self.dir.iterdir():
            p.unlink()
        self.dir.rmdir()


@pytest.fixture
def slow_reader() -> Iterator[SlowReader]:
    daemon = SlowReader()
    yield daemon
    daemon.close()


def test_ctrl_c_while_the_request_goes_out_reaches_the_daemon_as_an_interrupt(
        tmp_path: Path, slow_reader: SlowReader) -> None:
    """The daemon has a run from the request's first byte: a Ctrl-C from then on must arrive as
    `Interrupt` (the run records sigint), not as the client dying mid-request (client_disconnected)."""
    env = {**os.environ, **{f"ASSAY_EDGE_FILL_{i}": "x" * 100_000 for i in range(6)}}  # > the socket buffer
    args = ["run", "--socket", str(slow_reader.socket), "--out", "out", "--run-id", "int", "--", "/bin/true"]
    proc = subprocess.Popen([*CLIENTS["fast"](), *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60  # readiness, not timing: it blocks within milliseconds
        while not blocked_sending(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            os.sched_yield()
        assert blocked_sending(proc.pid), "the client never blocked sending its request"
        proc.send_signal(signal.SIGINT)
        slow_reader.go.set()
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    slow_reader.thread.join(30)
    assert slow_reader.after_request == [protocol.Interrupt()], stderr
    assert proc.returncode == 130, stderr
