"""One run inside the daemon: a forked worker that serves one client's request.

The worker turns the request into the same `RunRequest` direct mode builds,
with the caller's identity everywhere it matters:

- the command runs with the caller's uid, gid and groups (SO_PEERCRED and
  SO_PEERGROUPS, never what the request says), in the caller's working
  directory (entered through the directory fd the caller opened), with the
  caller's environment and its stdin/stdout/stderr (passed fds, terminal
  included);
- the spool and the archive are written to a root-only staging directory
  while the command runs (it has the caller's uid, so it could rewrite
  anything in the caller's `--out`), and delivered once it is gone: only
  through the `--out` directory fd the caller passed, with the caller's
  filesystem identity, so they land where the caller could write and belong
  to the caller (runner/daemon/staging.py);
- the caller's policy is met with the operator's floor (policy/floor.py).

Then `session.execute` runs it exactly as direct mode does; progress and the
summary go back over the socket, Ctrl-C and a vanished client come back as
requests (`ClientControl`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import select
import signal
import socket
import stat
import struct
import time
from collections.abc import Callable
from pathlib import Path

from policy.floor import meet
from policy.model import PolicyError, ResolvedPolicy, resolve, validate_policy
from runner.capture.control import End, Interrupt
from runner.capture.inputs import check_ringbuf_pages, check_run_id
from runner.capture.session import RunRequest, execute
from runner.capture.spawn import CallerProcess, Credentials
from runner.capture.status import REFRESH_S, summary
from runner.daemon import protocol
from runner.daemon.config import DaemonConfig
from runner.daemon.peer import Peer, caller_may_write
from runner.daemon.sensor import SharedSensor
from runner.daemon.staging import Delivery, staging_dir
from runner.daemon.workspace import home, run_tmpdir, workspace
from runner.enforce import prepare as enforce
from runner.errors import RunnerError
from runner.evidence import publish
from runner.logs import get_logger
from runner.ship.queue import ShipQueue

REPORT = struct.Struct(">QQQdd")
"""events, drops, untracked tasks, the command's start (monotonic s) and the seconds from its exit to
the archive delivered: what the worker tells the daemon for `daemon status` and its metrics (one
atomic pipe write; the last two and untracked are 0 until the run's final report)."""
LET_GO = (1 << 64) - 1
"""`events` of the report that says the run's evidence is delivered: the daemon closes its copy of the
caller's `--out` descriptor and answers `LET_GO_ACK` (runner/daemon/orphan.py)."""
LET_GO_ACK = b"k"
LET_GO_TIMEOUT_S = 5.0
FINISH_TIMEOUT_S = 30
log = get_logger("daemon.worker")


class ClientControl:
    """The session's `RunControl` over the client's socket (runner/capture/control.py).

    The socket is non-blocking while the command runs: progress that does
    not fit is held back (never a partial frame lost, never a drain loop
    blocked on a client that stopped reading).
    """

    def __init__(self, conn: socket.socket, report_fd: int, status_line: bool) -> None:
        self._conn = conn
        self._report_fd = report_fd
        self._status_line = status_line
        self._reader = protocol.FrameReader(max_fds=0)
        self._out = b""
        self._next = 0.0
        self._started = 0.0
        self._ended = False
        self._shutdown = False
        signal.signal(signal.SIGUSR1, self._on_shutdown)
        conn.setblocking(False)

    def _on_shutdown(self, _signum: int, _frame: object) -> None:
        self._shutdown = True

    def progress(self, events: int, drops: Callable[[], dict[str, int]]) -> None:
        now = time.monotonic()
        self._started = self._started or now
        if now < self._next:
            return
        self._next = now + REFRESH_S
        dropped = sum(drops().values())
        with contextlib.suppress(BlockingIOError):  # the daemon is busy: the next report will do
            os.write(self._report_fd, REPORT.pack(events, dropped, 0, 0.0, 0.0))
        if self._status_line and not self._out:
            self._out = protocol.encode(protocol.Progress(events=events, drops=dropped,
                                                          elapsed_s=now - self._started))
        self._flush()

    def _flush(self) -> None:
        try:
            while self._out:
                self._out = self._out[self._conn.send(self._out):]
        except BlockingIOError:
            pass
        except OSError:
            self._reader.eof = True

    def requests(self) -> list[Interrupt | End]:
        out: list[Interrupt | End] = []
        try:
            while not self._reader.eof:
                self._reader.feed(self._conn)
                while (body := self._reader.frame()) is not None:
                    if isinstance(protocol.decode_client(body), protocol.Interrupt):
                        out.append(Interrupt())
        except BlockingIOError:
            pass
        except (OSError, protocol.ProtocolError):
            self._reader.eof = True
        if not self._ended and (self._shutdown or self._reader.eof):
            self._ended = True
            out.append(End(reason="daemon_shutdown" if self._shutdown else "client_disconnected"))
        return out

    def done(self) -> None:
        """Nothing to take down here: the client clears its own status line."""

    def finish(self, msg: protocol.Finished | protocol.Refused) -> None:
        """The last message, sent blocking but bounded: a client that stopped reading is given up."""
        finish(self._conn, msg, self._out)


def finish(conn: socket.socket, msg: protocol.Finished | protocol.Refused, pending: bytes = b"") -> None:
    conn.settimeout(FINISH_TIMEOUT_S)
    try:
        conn.sendall(pending + protocol.encode(msg))
    except OSError as exc:
        log.warning("run.client_gone", error=str(exc))


def preload() -> None:
    """Import and prime, once in the daemon, what every run needs: its workers are forks and inherit it.

    Measured per run before: about 40 ms of jsonschema import and schema
    check, 5 ms of validate's decoders, 3 ms of redaction regexes.
    """
    publish.warm()


def serve_run(conn: socket.socket, fds: list[int], msg: protocol.RunStart, peer: Peer,
              config: DaemonConfig, report_fd: int, sensor: SharedSensor) -> int:
    """The worker's whole life; returns its exit status (0 when the run itself went through)."""
    stdin, stdout, stderr, out_fd, cwd_fd = fds
    try:
        creds = command_credentials(msg, peer)
        os.setgroups(list(peer.groups))  # for the file operations as the caller (peer.py, staging.py)
        with (staging_dir(check_run_id(msg.run_id)) as staging,
              run_tmpdir(peer.uid, msg.run_id, creds) as tmpdir):
            req = _request(msg, peer, creds, config, (stdin, stdout, stderr), out_fd, cwd_fd, staging, tmpdir)
            protocol.send(conn, protocol.Started(run_id=req.run_id))
            control = ClientControl(conn, report_fd, msg.status_line)
            log.info("run.start", run_id=req.run_id, uid=creds.uid, caller_pid=peer.pid)
            delivery = Delivery(staging, req.run_id, out_fd, peer.credentials)  # as direct mode: the caller's
            try:
                result = execute(dataclasses.replace(req, control=control, sensor=sensor,
                                                     on_spool_final=delivery.spool_final))
            finally:  # the spool reaches the caller even when the archive could not be made
                delivery.finish()
            # Everything the caller waits for is in its --out: it is told now, and the staging
            # directory is removed after (the client's wall time ends with this message). Before
            # that, nothing of the daemon's holds the caller's --out or working directory any more.
            let_go(report_fd, out_fd, cwd_fd)
            archive = os.path.join(msg.out_display, f"{req.run_id}.tar.gz")
            text = summary(result.normalized, result.exit_code, result.elapsed, archive)
            control.finish(protocol.Finished(exit_code=result.exit_code, summary=text))
            _final_report(report_fd, result.normalized.kernel.count, result.marks)
            _enqueue_for_shipping(config, staging / f"{req.run_id}.tar.gz", req.run_id)
    except RunnerError as exc:
        log.warning("run.failed", error=str(exc), uid=peer.uid)
        finish(conn, protocol.refused(str(exc), exc.exit_code))
        return 1
    log.info("run.finished", run_id=req.run_id, exit_code=result.exit_code,
             seconds=round(result.elapsed, 3), events=result.normalized.kernel.count)
    return 0


def _enqueue_for_shipping(config: DaemonConfig, archive: Path, run_id: str) -> None:
    """With `[ship] ref`, a copy of the archive joins the daemon's shipping queue (runner/ship/)."""
    if not config.ship.ref or not archive.is_file():
        return
    try:
        entry = ShipQueue(Path(config.ship.queue_dir)).enqueue(archive, run_id)
    except OSError as exc:
        log.error("ship.enqueue_failed", run_id=run_id, error=str(exc))
        return
    log.info("ship.enqueued", run_id=run_id, entry=str(entry))


def let_go(report_fd: int, *caller_dirs: int) -> None:
    """Close the caller's directories and have the daemon close its copy of `--out`, waiting (bounded)
    for its answer: once `run` returns, no process of the daemon's keeps them open."""
    for fd in caller_dirs:
        os.close(fd)
    try:
        os.set_blocking(report_fd, True)
        os.write(report_fd, REPORT.pack(LET_GO, 0, 0, 0.0, 0.0))
        answer = select.poll()
        answer.register(report_fd, select.POLLIN)
        if not answer.poll(LET_GO_TIMEOUT_S * 1000) or os.read(report_fd, 1) != LET_GO_ACK:
            log.warning("run.let_go_unanswered", hint="the daemon may still hold the caller's --out")
    except OSError as exc:
        log.warning("run.let_go_failed", error=str(exc))


def _final_report(report_fd: int, events: int, marks: dict[str, float]) -> None:
    """The run's totals and timings for the daemon's metrics (runner/daemon/metrics.py)."""
    ready = time.monotonic() - marks["exited"]
    with contextlib.suppress(OSError):  # the daemon is gone or busy: its metrics miss one run
        os.write(report_fd, REPORT.pack(events, int(marks["drops"]), int(marks["untracked"]),
                                         marks["started"], ready))


def command_credentials(msg: protocol.RunStart, peer: Peer) -> Credentials:
    """The caller's own ids; only a root caller may name another user (`--user`)."""
    if msg.user is None or msg.user == peer.uid:
        return peer.credentials
    if peer.uid != 0:
        raise RunnerError(f"--user: {peer.describe()} may only run commands as itself")
    try:
        entry = pwd.getpwuid(msg.user)
    except KeyError:
        raise RunnerError(f"--user {msg.user}: no such user on this machine") from None
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    return Credentials(uid=entry.pw_uid, gid=entry.pw_gid, groups=groups)


def _request(msg: protocol.RunStart, peer: Peer, creds: Credentials, config: DaemonConfig,
             stdio: tuple[int, int, int], out_fd: int, cwd_fd: int, staging: Path,
             tmpdir: Path) -> RunRequest:
    """Direct mode's request for this caller, evidence staged in `staging`; RunnerError if unusable."""
    workdir = workspace(cwd_fd, config.workspace_roots)
    if os.fsencode(workdir) != msg.workdir:  # compared, never looked up: no answer about other paths
        raise RunnerError(f"the working directory {os.fsdecode(msg.workdir)} is not the directory the client "
                          "opened (did it move?)")
    if not stat.S_ISDIR(os.fstat(out_fd).st_mode):
        raise RunnerError("the output descriptor is not a directory")
    if not caller_may_write(out_fd, peer.credentials):  # the caller's --out, whoever the command runs as
        raise RunnerError(f"--out {msg.out_display}: {peer.describe()} may not write there")
    check_ringbuf_pages(msg.ringbuf_pages)  # same refusal as direct mode; the ring is the daemon's
    env = {os.fsdecode(k): os.fsdecode(v) for k, v in msg.env.items()} | {"TMPDIR": str(tmpdir)}
    policy = _policy(msg, config, {"workspace": str(workdir), "home": home(creds.uid), "tmpdir": str(tmpdir)})
    enforce.check(policy)
    return RunRequest(
        run_id=msg.run_id, exe=os.fsdecode(msg.exe), argv=[os.fsdecode(a) for a in msg.argv],
        workdir=workdir, out_dir=staging, ringbuf_pages=config.ringbuf_pages, env=env,
        user=creds if creds.uid != 0 else None, isolate_net=msg.isolate_net, policy=policy,
        stdio=stdio, caller=CallerProcess(cwd_fd=cwd_fd, umask=msg.umask, rlimits=tuple(msg.rlimits)),
        limits=config.limits, staged=True, allow_compat_syscalls=msg.allow_compat_syscalls,
    )


def _policy(msg: protocol.RunStart, config: DaemonConfig, variables: dict[str, str]) -> ResolvedPolicy | None:
    """The caller's policy, met with the floor, both resolved from trusted data only
    (runner/daemon/workspace.py): the caller's environment and claims play no part."""
    try:
        caller = None
        if msg.policy is not None:
            validate_policy(msg.policy)
            caller = resolve(msg.policy, **variables)
        if config.floor is None:
            return caller
        return meet(resolve(config.floor, **variables), caller)
    except (PolicyError, ValueError) as exc:
        name = msg.policy.name if msg.policy else "floor"
        raise RunnerError(f"policy {name}: {exc}") from None
