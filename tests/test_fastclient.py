"""The C fast client (runner/daemon/fastclient.c) against the Python client, side by side.

Both clients talk to a scripted stand-in daemon on a private socket that
records the request (message and descriptors) and answers as told. For each
shape of invocation the two must send the same `RunStart` and print, exit
and leave behind exactly the same; for everything the fast client does not
serve, it must hand over to the Python CLI, which then behaves as it always
did. The real daemon with real users is in tests/test_daemon_kernel.py.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import socket
import stat
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from normalizer import redact
from runner.capture.status import REFRESH_S
from runner.daemon import protocol
from tests.fastclient_support import (
    CLIENTS,
    ROOT,
    SOURCE,
    FakeDaemon,
    Script,
    Seen,
    daemon_factory,
    fast_binary,
    finished,
    run_client,
)

__all__ = ["daemon_factory"]  # the fixture, shared with tests/test_fastclient_edges.py


def both(args: Callable[[str], list[str]], cwd: Callable[[str], Path], script: Script,
         daemon_factory: Callable[[Script], FakeDaemon], env: dict[str, str] | None = None,
         ) -> dict[str, tuple[subprocess.CompletedProcess[str], FakeDaemon]]:
    """Each client against its own stand-in daemon, with the same arguments (given the socket)."""
    out = {}
    for client in CLIENTS:
        fake = daemon_factory(script)
        out[client] = (run_client(client, args(str(fake.socket)), cwd(client), env), fake)
    return out


def _requests(results: dict) -> dict[str, protocol.RunStart]:
    reqs = {}
    for client, (_proc, fake) in results.items():
        sent = [s for s in fake.seen if s.request is not None]
        assert len(sent) == 1, f"{client}: {len(sent)} requests"
        reqs[client] = sent[0].request
    return reqs


@pytest.mark.parametrize("shape", ["plain", "relative", "isolated", "auto"])
def test_both_clients_send_the_same_request_and_print_the_same(tmp_path: Path, shape: str,
                                                               daemon_factory: Callable) -> None:
    work = {c: tmp_path / c / "work" for c in CLIENTS}
    for w in work.values():
        (w / "bin").mkdir(parents=True)
        tool = w / "bin" / "tool"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)

    def args(sock: str) -> list[str]:
        mode = [] if shape == "auto" else ["--daemon"]
        if shape == "relative":  # --out, --workdir and the command relative; a new --out two levels deep
            return ["run", *mode, "--socket", sock, "--out", "new/runs", "--workdir", "bin", "--run-id", "r1",
                    "--", "./tool", "a b", "\u00e9"]
        extra = ["--net", "isolated", "--ringbuf-pages", "64"] if shape == "isolated" else []
        return ["run", *mode, f"--socket={sock}", "--out", "out", "--run-id", "bench-start-0", "--force",
                *extra, "--", "sh", "-c", "exit 3"]

    env = {**os.environ, "PATH": f"{ROOT / 'nonexistent'}:/usr/local/bin:/usr/bin:/bin", "ASSAY_X": "1=2"}
    results = both(args, lambda c: work[c], finished(3), daemon_factory, env)
    reqs = _requests(results)
    py, fast = reqs["python"], reqs["fast"]
    assert fast.out_display == py.out_display.replace("/python/", "/fast/")
    assert fast.workdir == py.workdir.replace(b"/python/", b"/fast/")
    assert fast.exe == py.exe.replace(b"/python/", b"/fast/")
    same = {"out_display": py.out_display, "workdir": py.workdir, "exe": py.exe}
    import msgspec

    assert msgspec.structs.replace(fast, **same) == py
    procs = {c: r[0] for c, r in results.items()}
    assert procs["fast"].returncode == procs["python"].returncode == 3
    assert procs["fast"].stderr == procs["python"].stderr and procs["fast"].stdout == procs["python"].stdout
    for client, (_proc, fake) in results.items():  # stdin, stdout, stderr, --out, the working directory
        fds = fake.seen[-1].fds
        assert len(fds) == 5 and all(stat.S_ISDIR(f.st_mode) for f in fds[3:])
        out = work[client] / ("new/runs" if shape == "relative" else "out")
        assert (fds[3].st_ino, fds[4].st_ino) == (out.stat().st_ino, (work[client] / (
            "bin" if shape == "relative" else "")).stat().st_ino)


def test_a_generated_run_id_has_the_python_clients_form(tmp_path: Path, daemon_factory: Callable) -> None:
    results = both(lambda s: ["run", "--socket", s, "--out", "out", "--", "true"], lambda c: tmp_path,
                   finished(0), daemon_factory)
    for req in _requests(results).values():
        assert re.fullmatch(r"run-\d{8}T\d{6}Z-[0-9a-f]{4}", req.run_id), req.run_id


@pytest.mark.parametrize("ending", ["refused", "closed"])
def test_refusals_and_a_vanished_daemon_read_the_same_and_leave_no_new_out(
        tmp_path: Path, ending: str, daemon_factory: Callable) -> None:
    def script(conn: socket.socket, _seen: Seen) -> None:
        if ending == "refused":
            protocol.send(conn, protocol.refused("policy p: bad\x1b[2J tree \u202e", 126))

    for client in CLIENTS:
        (tmp_path / client).mkdir(exist_ok=True)
    results = both(lambda s: ["run", "--socket", s, "--out", "fresh", "--run-id", "z", "--", "true"],
                   lambda c: tmp_path / c, script, daemon_factory)
    py, fast = results["python"][0], results["fast"][0]
    assert (fast.returncode, fast.stderr, fast.stdout) == (py.returncode, py.stderr, py.stdout)
    assert fast.returncode == (126 if ending == "refused" else 125)
    assert fast.stderr.count("\n") == 1 and "\x1b" not in fast.stderr, fast.stderr
    assert not (tmp_path / "fast" / "fresh").exists() and not (tmp_path / "python" / "fresh").exists()


@pytest.mark.parametrize("case", ["help", "no-daemon", "not-found", "exists", "long-id", "secret-id",
                                  "abbreviated", "policy", "no-dashdash", "out-dots"])
def test_what_the_fast_client_does_not_serve_the_python_cli_does(tmp_path: Path, case: str,
                                                                   daemon_factory: Callable) -> None:
    for client in CLIENTS:
        (tmp_path / client / "out").mkdir(parents=True)
        (tmp_path / client / "out" / "old.tar.gz").write_text("")
    cases = {
        "help": lambda s: ["run", "--help"],
        "no-daemon": lambda s: ["run", "--daemon", "--socket", s + ".absent", "--out", "out", "--", "true"],
        "not-found": lambda s: ["run", "--socket", s, "--out", "out", "--", "no-such-command-here"],
        "exists": lambda s: ["run", "--socket", s, "--out", "out", "--run-id", "old", "--", "true"],
        "long-id": lambda s: ["run", "--socket", s, "--out", "out", "--run-id", "ci-job-token-7", "--",
                              "true"],
        "secret-id": lambda s: ["run", "--socket", s, "--out", "out", "--run-id", "AKIAABCDEFGHIJKLMNOP",
                                "--", "true"],
        "abbreviated": lambda s: ["run", "--sock", s, "--out", "out", "--run-id", "q", "--", "true"],
        "policy": lambda s: ["run", "--socket", s, "--sandbox", "read-only", "--out", "out", "--run-id", "q",
                             "--", "true"],
        "no-dashdash": lambda s: ["run", "--socket", s, "--out", "out", "--run-id", "q", "true"],
        "out-dots": lambda s: ["run", "--socket", s, "--out", "./out/../out", "--run-id", "q", "--", "true"],
    }
    results = both(cases[case], lambda c: tmp_path / c, finished(0), daemon_factory)
    py, fast = results["python"][0], results["fast"][0]
    normal = {c: r[0].stderr.replace(str(r[1].socket), "SOCK").replace(str(tmp_path / c), "TMP")
              for c, r in results.items()}
    assert (fast.returncode, fast.stdout, normal["fast"]) == (py.returncode, py.stdout, normal["python"])
    reqs = {c: [s.request for s in r[1].seen if s.request] for c, r in results.items()}
    assert [r.run_id for r in reqs["fast"]] == [r.run_id for r in reqs["python"]]
    if case in ("help", "no-daemon", "not-found", "exists", "secret-id"):  # said before any request
        assert not reqs["python"] and (py.returncode != 0) == (case != "help")
    else:
        assert len(reqs["python"]) == 1 and py.returncode == 0


def test_run_ids_the_fast_client_accepts_cannot_look_like_secrets() -> None:
    """fastclient.c's SECRET_LITERALS are NEEDLES' literals a run id can hold, lower-cased.

    Every rule must have its literal prefilter (else any text is a candidate
    and the C client would have to send every run id to Python), and every
    literal must be in the C list unless a run id cannot contain it.
    """
    found = re.search(r"SECRET_LITERALS\[\] = \{(.*?)\};", SOURCE.read_text(), re.S)
    assert found, SOURCE
    listed = found.group(1)
    in_c = set(re.findall(r'"([^"]*)"', listed))
    run_id_chars = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
    wanted = set()
    for name, pattern in redact.rules():
        assert (name, pattern.pattern) in redact.NEEDLES, f"rule {name} has no literals: change fastclient.c"
        _fold, literals = redact.NEEDLES[(name, pattern.pattern)]
        wanted |= {lit.lower() for lit in literals if set(lit) <= run_id_chars}
    assert in_c == wanted
    for secret in ("AKIAABCDEFGHIJKLMNOP", "ghp_" + "a" * 36, "sk-" + "a" * 24, "xoxb-1234567890"):
        assert redact.find_unredacted(secret) is not None and any(lit in secret.lower() for lit in in_c)


def test_ctrl_c_reaches_the_daemon_as_an_interrupt(tmp_path: Path, daemon_factory: Callable) -> None:
    def script(conn: socket.socket, seen: Seen) -> None:
        protocol.send(conn, protocol.Started(run_id="c"))
        body = protocol.receive(conn, protocol.FrameReader(max_fds=0))
        seen.later.append(protocol.decode_client(body) if body else None)
        protocol.send(conn, protocol.Finished(exit_code=130, summary="ended"))

    fake = daemon_factory(script)
    client = subprocess.Popen([fast_binary(), "run", "--socket", str(fake.socket), "--out", "out",
                               "--run-id", "c", "--", "true"],
                              cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    _until_mirroring(client.pid)  # its Ctrl-C now tells the daemon (before, it ends the client)
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=30)
    assert client.returncode == 130 and err == "ended\n"
    assert isinstance(fake.seen[-1].later[0], protocol.Interrupt)


def _until_mirroring(pid: int) -> float:
    """Wait until client `pid` mirrors the run (it catches SIGTERM: both clients set their run-time
    handlers as they start mirroring, after setting their first refresh); the time it was seen."""
    deadline = time.monotonic() + 30
    while True:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        caught = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))
        if caught & (1 << (signal.SIGTERM - 1)):
            return time.monotonic()
        assert time.monotonic() < deadline, f"client {pid} never started mirroring the run"
        time.sleep(0.005)


def _peer_pid(conn: socket.socket) -> int:
    """The pid of the client at the other end of `conn`."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[0]


def test_the_status_line_on_a_terminal_is_the_same(tmp_path: Path, daemon_factory: Callable) -> None:
    def script(conn: socket.socket, _seen: Seen) -> None:
        mirroring = _until_mirroring(_peer_pid(conn))
        time.sleep(max(0.0, mirroring + REFRESH_S - time.monotonic()))  # its first refresh is due by then
        # in one write: the second is in the client's socket when it draws the first, so it comes
        # within the refresh interval (not drawn) unless the client stalls for REFRESH_S between them
        conn.sendall(protocol.encode(protocol.Progress(events=12, drops=1, elapsed_s=0.349))
                     + protocol.encode(protocol.Progress(events=13, drops=1, elapsed_s=0.35)))
        protocol.send(conn, protocol.Finished(exit_code=0, summary="done"))

    screens = {}
    for client in CLIENTS:
        fake = daemon_factory(script)
        leader, follower = pty.openpty()
        fcntl.ioctl(leader, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a terminal with rows
        proc = subprocess.Popen([*CLIENTS[client](), "run", "--socket", str(fake.socket), "--out", "out",
                                 "--run-id", "s", "--", "true"], cwd=tmp_path, stderr=follower,
                                stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                env={**os.environ, "TERM": "xterm"})
        os.close(follower)
        data = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        proc.wait(timeout=30)
        os.close(leader)
        screens[client] = data
    assert screens["fast"] == screens["python"]
    assert b"12 events \xc2\xb7 1 drops \xc2\xb7 0.3s" in screens["fast"]
    assert b"13 events" not in screens["fast"]
    assert b"\x1b[1;23r" in screens["fast"] and b"\x1b[r" in screens["fast"]  # the row taken, then given back


def test_a_closed_stdin_reaches_the_daemon_as_dev_null(tmp_path: Path, daemon_factory: Callable) -> None:
    null = os.stat(os.devnull)
    for client in CLIENTS:
        fake = daemon_factory(finished(0))
        proc = subprocess.run([*CLIENTS[client](), "run", "--socket", str(fake.socket), "--out", "out",
                               "--run-id", "n", "--force", "--", "true"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, preexec_fn=lambda: os.close(0))
        assert proc.returncode == 0, (client, proc.stderr)
        stdin, *_ = fake.seen[-1].fds
        assert (stdin.st_rdev, stat.S_ISCHR(stdin.st_mode)) == (null.st_rdev, True), client
