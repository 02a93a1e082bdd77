"""`probe-op`: perform one operation with real syscalls and report its errno.

Why a helper: a shell only reports a failed operation as an English message on
stderr ("Permission denied"), and guessing errno from text is what the
reference harness did. This helper makes the syscall itself and turns the
errno into the observed result with one table (`status_for_errno`), so every
probe normalizes outcomes the same way.

Output is one line of five fields separated by the unit separator (0x1f), so
a probe reads it with `IFS=$'\\x1f' read -r status errno message target detail`
(empty fields survive, unlike with tabs): observed status, errno mnemonic (or
empty), short message, the target as the kernel layer names it, and a flat
JSON object of details. Exit codes follow probes/AGENTS.md: 0 the operation
was attempted (whatever its outcome), 1 invalid arguments, 2 internal error,
3 timeout.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from runner.sockaddr import SUN_PATH_MAX

SEP = "\x1f"
DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
TIMEOUT_S = 5.0
EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_TIMEOUT = 0, 1, 2, 3


def status_for_errno(code: int | None) -> str:
    """success without an errno; denied for permission errnos (EACCES, EPERM, EROFS); error otherwise."""
    if code is None:
        return "success"
    return "denied" if code in DENIED_ERRNOS else "error"


@dataclass
class Outcome:
    """What one operation did."""

    target: str
    errno: int | None = None
    message: str = "ok"
    status: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failed(cls, target: str, exc: OSError, step: str, **detail: Any) -> Outcome:
        """The step's errno decides; an OSError Python raised without one (before any syscall, such
        as "AF_UNIX path too long") is an `error` with its own message, never a success."""
        if exc.errno is None:
            return cls(target, None, f"{step}: {exc}", "error", {"step": step, **detail})
        return cls(target, exc.errno, f"{step}: {os.strerror(exc.errno)}", detail={"step": step, **detail})

    def line(self) -> str:
        status = self.status or status_for_errno(self.errno)
        name = errno.errorcode.get(self.errno, f"E{self.errno}") if self.errno is not None else ""
        fields = [status, name, self.message, self.target, json.dumps(self.detail, sort_keys=True)]
        return SEP.join(f.replace(SEP, " ").replace("\n", " ") for f in fields)


def endpoint(host: str, port: int) -> str:
    """host:port as the kernel layer writes it (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def remove(path: str) -> bool:
    """Best-effort clean-up of what the operation created: a failed removal is not its outcome."""
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


WRITE_FLAGS = {
    "create": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "append": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "plain": os.O_WRONLY,
}


def op_write(a: argparse.Namespace) -> Outcome:
    data = a.data.encode()
    try:
        fd = os.open(a.path, WRITE_FLAGS[a.mode] | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        return Outcome.failed(a.path, exc, "open")
    try:
        written = os.write(fd, data)
    except OSError as exc:
        return Outcome.failed(a.path, exc, "write")
    finally:
        os.close(fd)
    detail: dict[str, Any] = {"bytes": written}
    if a.cleanup:
        detail["removed"] = remove(a.path)
    if written != len(data):
        return Outcome(a.path, None, f"short write {written}/{len(data)}", "partial", detail)
    return Outcome(a.path, detail=detail)


def op_read(a: argparse.Namespace) -> Outcome:
    try:
        with open(a.path, "rb") as fh:
            data = fh.read(a.max_bytes)
    except OSError as exc:
        return Outcome.failed(a.path, exc, "open")
    return Outcome(a.path, detail={"bytes": len(data), "text": data.decode("utf-8", "replace").strip()[:120]})


def op_list(a: argparse.Namespace) -> Outcome:
    try:
        names = os.listdir(a.path)
    except OSError as exc:
        return Outcome.failed(a.path, exc, "opendir")
    return Outcome(a.path, detail={"entries": len(names)})


def op_symlink_write(a: argparse.Namespace) -> Outcome:
    """Create LINK -> TARGET, then write through LINK; the link and the file are removed."""
    try:
        os.symlink(a.target, a.link)
    except OSError as exc:
        return Outcome.failed(a.link, exc, "symlink")
    try:
        out = op_write(argparse.Namespace(path=a.link, mode="create", data="probe\n", cleanup=False))
        if out.errno is None:
            out.detail["removed"] = remove(a.target)
        out.detail["resolves_to"] = a.target
        return out
    finally:
        remove(a.link)


def op_exec_script(a: argparse.Namespace) -> Outcome:
    """Write a tiny shell script at PATH, make it executable, execute it; the script is removed."""
    created = op_write(
        argparse.Namespace(path=a.path, mode="create", data="#!/bin/sh\nexit 0\n", cleanup=False)
    )
    if created.errno is not None:
        created.detail["step"] = "create"
        return created
    try:
        os.chmod(a.path, 0o755)
        done = subprocess.run([a.path], capture_output=True, timeout=TIMEOUT_S, check=False)
    except OSError as exc:
        return Outcome.failed(a.path, exc, "exec")
    finally:
        remove(a.path)
    if done.returncode != 0:
        return Outcome(
            a.path, None, f"script exited {done.returncode}", "error", {"exit_code": done.returncode}
        )
    return Outcome(a.path, detail={"exit_code": 0})


def op_spawn(a: argparse.Namespace) -> Outcome:
    """Start COUNT children of PROGRAM concurrently and wait for all of them."""
    children, first_error = [], None
    for _ in range(a.count):
        try:
            children.append(
                subprocess.Popen([a.program], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        except OSError as exc:
            first_error = first_error or exc
    codes = [c.wait(timeout=TIMEOUT_S) for c in children]
    ok = sum(1 for c in codes if c == 0)
    detail = {"requested": a.count, "started": len(children), "exited_zero": ok}
    if first_error is None and ok == a.count:
        return Outcome(a.program, detail=detail)
    if first_error is not None and not children:
        return Outcome.failed(a.program, first_error, "spawn", **detail)
    code = first_error.errno if first_error else None
    return Outcome(a.program, code, f"{ok} of {a.count} children ran", "partial", detail)


def _tcp_connect(target: str, family: int, addr: Any) -> Outcome:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(TIMEOUT_S)
        try:
            s.connect(addr)
        except TimeoutError:
            return Outcome(target, errno.ETIMEDOUT, "connect: timed out", detail={"step": "connect"})
        except OSError as exc:
            return Outcome.failed(target, exc, "connect")
    return Outcome(target)


def op_tcp_connect(a: argparse.Namespace) -> Outcome:
    family = socket.AF_INET6 if ":" in a.host else socket.AF_INET
    return _tcp_connect(endpoint(a.host, a.port), family, (a.host, a.port))


def op_tcp_loopback(a: argparse.Namespace) -> Outcome:
    """Listen on an ephemeral loopback port and connect to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        return _tcp_connect(endpoint("127.0.0.1", port), socket.AF_INET, ("127.0.0.1", port))


def op_udp_loopback(a: argparse.Namespace) -> Outcome:
    """Send one datagram (sendto with an address) to a loopback receiver and wait for it."""
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
    ):
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(TIMEOUT_S)
        target = endpoint("127.0.0.1", rx.getsockname()[1])
        try:
            tx.sendto(b"probe", rx.getsockname())
        except OSError as exc:
            return Outcome.failed(target, exc, "sendto")
        try:
            rx.recv(16)
        except TimeoutError:
            return Outcome(target, errno.ETIMEDOUT, "sent, never received", "partial", {"step": "recv"})
    return Outcome(target, detail={"bytes": 5})


def op_unix_socket(a: argparse.Namespace) -> Outcome:
    """Bind a pathname unix socket at PATH, listen, connect to it; the socket file is removed.

    A PATH longer than `sun_path` (a deep workspace or a long TMPDIR: its
    `.fence-tmp` holds the probe's socket) cannot be an address as given, so
    it is bound and connected to by its name relative to its directory, from
    inside that directory: the same file in the same directory, so the same
    sandbox decision. The target is then that name, as the kernel layer
    records the connect, and the detail's `dir` says where it is.
    """
    address, detail = a.path, {}
    if len(os.fsencode(a.path)) > SUN_PATH_MAX:
        directory, address = os.path.split(a.path)
        try:
            os.chdir(directory or ".")
        except OSError as exc:
            return Outcome.failed(a.path, exc, "chdir")
        detail = {"dir": directory}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        try:
            server.bind(address)
        except OSError as exc:
            return Outcome.failed(address, exc, "bind", **detail)
        try:
            server.listen(1)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(TIMEOUT_S)
                client.connect(address)
        except OSError as exc:
            return Outcome.failed(address, exc, "connect", **detail)
        finally:
            remove(address)
    return Outcome(address, detail=detail)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"probe-op: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="probe-op", description="Perform one operation and report status, errno and target.")
    sub = p.add_subparsers(dest="op", required=True, parser_class=_Parser)
    ops: dict[str, Callable[[argparse.Namespace], Outcome]] = {}

    def add(name: str, fn: Callable[[argparse.Namespace], Outcome], help_: str) -> argparse.ArgumentParser:
        ops[name] = fn
        return sub.add_parser(name, help=help_)

    w = add("write", op_write, "open PATH for writing and write DATA")
    w.add_argument("path")
    w.add_argument("--mode", choices=sorted(WRITE_FLAGS), default="create")
    w.add_argument("--data", default="probe\n")
    w.add_argument("--cleanup", action="store_true", help="remove PATH after a successful write")
    r = add("read", op_read, "read up to MAX bytes of PATH")
    r.add_argument("path")
    r.add_argument("--max-bytes", type=int, default=4096)
    add("list", op_list, "list the directory PATH").add_argument("path")
    s = add("symlink-write", op_symlink_write, "create LINK -> TARGET and write through LINK")
    s.add_argument("target")
    s.add_argument("link")
    add("exec-script", op_exec_script, "create an executable script at PATH and run it").add_argument("path")
    sp = add("spawn", op_spawn, "run COUNT children of PROGRAM")
    sp.add_argument("--count", type=int, default=4)
    sp.add_argument("program")
    t = add("tcp-connect", op_tcp_connect, "TCP connect to HOST PORT")
    t.add_argument("host")
    t.add_argument("port", type=int)
    add("tcp-loopback", op_tcp_loopback, "TCP connect to a loopback listener of our own")
    add("udp-loopback", op_udp_loopback, "send a UDP datagram to a loopback receiver of our own")
    add("unix-socket", op_unix_socket, "bind a unix socket at PATH and connect to it").add_argument("path")
    p.set_defaults(ops=ops)
    return p


def main() -> int:
    """Console script: one result line on stdout; see the module docstring for exit codes."""
    args = build_parser().parse_args()
    try:
        outcome = args.ops[args.op](args)
    except subprocess.TimeoutExpired as exc:
        print(f"probe-op: timeout: {exc}", file=sys.stderr)
        return EXIT_TIMEOUT
    except Exception as exc:  # the helper's own failure, not the operation's outcome
        print(f"probe-op: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    print(outcome.line())
    return EXIT_TIMEOUT if outcome.errno == errno.ETIMEDOUT else EXIT_OK
