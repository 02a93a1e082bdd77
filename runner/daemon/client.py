"""`assay-runner run` through the daemon: the client side, light on purpose.

The client checks its inputs as the caller (the same checks as direct mode),
opens `--out` and the working directory itself, and hands them with its
stdin/stdout/stderr to the daemon. Then it only draws: the live status line
from `Progress`, the summary from `Finished`, and it exits with the
command's exit code. Ctrl-C becomes an `Interrupt`; if the client dies, the
daemon notices the closed socket and ends the run.

It imports neither BCC nor the normalizer (a test checks `sys.modules`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
from pathlib import Path

from policy.load import PolicyFileError, load_policy, load_preset
from policy.model import Policy
from runner.capture.inputs import command_inputs, create_out_dir
from runner.capture.status import LiveStatus
from runner.capture.terminal import capable
from runner.daemon import protocol
from runner.errors import RunnerError
from runner.sockaddr import unix_address

DEFAULT_SOCKET = Path("/run/assay-runner/runner.sock")
SOCKET_ENV = "ASSAY_RUNNER_SOCKET"


def socket_path(args: argparse.Namespace) -> Path:
    """--socket, else $ASSAY_RUNNER_SOCKET, else the default."""
    return Path(getattr(args, "socket", None) or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET)


def connect(path: Path) -> socket.socket:
    """A connection to the daemon, or a one-line error saying what to do."""
    address = unix_address(path, f"--socket or ${SOCKET_ENV}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.connect(address)
    except FileNotFoundError:
        sock.close()
        raise RunnerError(f"no assay-runner daemon at {path}: start it (systemctl start assay-runner.socket) "
                          "or run directly as root with --direct") from None
    except PermissionError:
        sock.close()
        raise RunnerError(f"not allowed to use the assay-runner daemon at {path}: its socket is for group "
                          f"{_group_of(path)}; ask the operator to add you to it") from None
    except ConnectionRefusedError:
        sock.close()
        raise RunnerError(f"the assay-runner daemon at {path} is not running (stale socket): "
                          "restart it, or run directly as root with --direct") from None
    return sock


def _group_of(path: Path) -> str:
    import grp

    with contextlib.suppress(OSError, KeyError):
        return repr(grp.getgrgid(path.stat().st_gid).gr_name)
    return "(unknown)"


def policy_document(args: argparse.Namespace) -> Policy | None:
    """--policy or --sandbox as a document; the daemon resolves it for the caller."""
    try:
        if args.policy is not None:
            return load_policy(args.policy)
        if args.sandbox is not None:
            return load_preset(args.sandbox)
    except PolicyFileError as exc:
        raise RunnerError(str(exc), exc.exit_code) from None
    return None


def _user_id(user: str | None) -> int | None:
    if user is None:
        return None
    import pwd

    try:
        return pwd.getpwuid(int(user)).pw_uid if user.isdigit() else pwd.getpwnam(user).pw_uid
    except (KeyError, OverflowError):
        raise RunnerError(f"--user {user}: no such user on this machine") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _rlimits() -> list[tuple[int, int, int]]:
    """Every resource limit we have, for the command to have the same."""
    import resource

    which = {getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")}  # OFILE is NOFILE
    return sorted((r, *resource.getrlimit(r)) for r in which)


def _stdio() -> list[int]:
    """Our fds 0-2 to pass on; a closed one becomes /dev/null (as a shell would give).

    Closed when Python started (its `sys.__stdin__` etc. are None then): by
    now a file or socket we opened may have taken the number.
    """
    fds = []
    for fd, stream in enumerate((sys.__stdin__, sys.__stdout__, sys.__stderr__)):
        try:
            if stream is None:
                raise OSError("closed when the client started")
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
    return fds


def run_via_daemon(args: argparse.Namespace) -> int:
    """Send the run to the daemon and mirror it here; returns the command's exit code."""
    cmd, run_id, workdir, env, exe = command_inputs(args.cmd, args.run_id, args.workdir)
    request = protocol.RunStart(
        version=protocol.VERSION, run_id=run_id, exe=os.fsencode(exe), argv=[os.fsencode(a) for a in cmd],
        env={os.fsencode(k): os.fsencode(v) for k, v in env.items()}, workdir=os.fsencode(str(workdir)),
        out_display=str(args.out.resolve()), ringbuf_pages=args.ringbuf_pages,
        isolate_net=args.net == "isolated", allow_compat_syscalls=args.allow_compat_syscalls,
        user=_user_id(args.user), policy=policy_document(args),
        status_line=capable(2), umask=_umask(), rlimits=_rlimits(),
    )
    sock = connect(socket_path(args))  # before --out is created: no daemon, nothing left behind
    out_existed = os.path.isdir(args.out)
    out = create_out_dir(args.out, run_id, getattr(args, "force", False))
    try:
        return _send_and_mirror(sock, request, out, workdir)
    except RunnerError:
        if not out_existed:  # as in direct mode: no empty --out left behind by a run that never started
            with contextlib.suppress(OSError):
                out.rmdir()
        raise


def _send_and_mirror(sock: socket.socket, request: protocol.RunStart, out: Path, workdir: Path) -> int:
    out_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    cwd_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        protocol.send(sock, request, [*_stdio(), out_fd, cwd_fd])
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon refused us at once: its reason is waiting to be read
    finally:
        os.close(out_fd)
        os.close(cwd_fd)
    return _mirror(sock)


def _mirror(sock: socket.socket) -> int:
    """Draw what the daemon reports until the run is finished."""
    status = LiveStatus()

    def on_sigint(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            protocol.send(sock, protocol.Interrupt())

    def on_end(signum: int, _frame: object) -> None:
        """SIGTERM/SIGHUP end the client (the daemon then ends the run): the terminal is given back first."""
        status.clear()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    old = {signal.SIGINT: signal.signal(signal.SIGINT, on_sigint),
           **{s: signal.signal(s, on_end) for s in (signal.SIGTERM, signal.SIGHUP)}}
    reader = protocol.FrameReader(max_fds=0)
    try:
        while True:
            msg = _next_reply(sock, reader, "before the run finished")
            if isinstance(msg, protocol.Progress):
                status.update(msg.events, {"all": msg.drops}.copy, msg.elapsed_s)
            elif isinstance(msg, protocol.Finished):
                status.clear()
                print(msg.summary, file=sys.stderr)
                return msg.exit_code
            elif isinstance(msg, protocol.Refused):
                status.clear()
                raise RunnerError(msg.message, msg.exit_code)
    finally:
        status.clear()
        for signum, handler in old.items():
            signal.signal(signum, handler)
        sock.close()


def _next_reply(sock: socket.socket, reader: protocol.FrameReader, when: str) -> protocol.DaemonMessage:
    """The daemon's next message; a lost connection or a garbled reply is one line, never a traceback
    (a reset connection reads as a closed one, as in the C client)."""
    try:
        body = protocol.receive(sock, reader)
    except OSError:
        body = None
    if body is None:
        raise RunnerError(f"the assay-runner daemon closed the connection {when}; "
                          "see its log (journalctl -u assay-runner)")
    try:
        return protocol.decode_daemon(body)
    except protocol.ProtocolError as exc:
        raise RunnerError(str(exc)) from None


def daemon_status(path: Path) -> protocol.StatusReply:
    sock = connect(path)
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused at once: read why
            protocol.send(sock, protocol.StatusQuery(version=protocol.VERSION))
        msg = _next_reply(sock, protocol.FrameReader(max_fds=0), "before it answered")
    finally:
        sock.close()
    if isinstance(msg, protocol.Refused):
        raise RunnerError(msg.message, msg.exit_code)
    if not isinstance(msg, protocol.StatusReply):
        raise RunnerError("the assay-runner daemon gave no status reply; see its log")
    return msg
