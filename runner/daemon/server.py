"""The daemon's main loop: one socket, peer checks, a forked worker per run.

Single-threaded on purpose (a selector over the listening socket, the
connections still sending their request, the workers' report pipes and a
signal wake-up pipe), so forking a worker is safe. Each accepted connection
is checked with the kernel's peer credentials before a byte of it is
decoded; its request is read without blocking (a slow or silent peer cannot
stall anyone else) and bounded by the protocol's frame limit.

The monitor is loaded once, before listening, and stays for the daemon's
life in the sensor process (runner/daemon/sensor.py), which reads the ring
and hands each run its records over the run's channel. A run request
within the limits takes a run key (its channel goes to the sensor) and
forks a worker (runner/daemon/worker.py) that owns the connection, the
passed fds and the run's end of the channel from then on. A status request
is answered here. SIGTERM stops accepting, asks every worker to end its run
(SIGUSR1: the run's cgroup is killed and its archive written with a
`s2_run_ended: reason=daemon_shutdown` health note) and exits when the last
one is done.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from runner.capture.cgroup import fix_mount
from runner.capture.stale import sweep
from runner.daemon import protocol, worker
from runner.daemon.address import BACKLOG, listen, metrics_listeners
from runner.daemon.config import MAX_CONNECTIONS_PER_USER, DaemonConfig
from runner.daemon.metrics import Endpoint, Metrics
from runner.daemon.orphan import Held, recover_killed, remove_leftovers
from runner.daemon.peer import Peer, peer_of, refusal
from runner.daemon.sensor import SensorHandle, SharedSensor
from runner.daemon.spare import Spare, fork_spare
from runner.daemon.status import status_reply
from runner.daemon.workspace import remove_run_tmp, run_tmp_path
from runner.errors import RunnerError
from runner.logs import get_logger
from runner.ship.queue import Shipper, ShipQueue

MAX_PENDING = MAX_CONNECTIONS_PER_USER
"""Connections of non-root callers that have not finished sending their request; more are refused
at once (root's are always taken: `daemon status` must answer however busy the daemon is)."""
log = get_logger("daemon")


@dataclass
class Pending:
    conn: socket.socket
    peer: Peer
    deadline: float
    """When its request must have arrived in full (`limits.request_timeout_s` after the accept)."""
    reader: protocol.FrameReader = field(default_factory=protocol.FrameReader)


@dataclass
class ActiveRun:
    run_id: str
    peer: Peer
    worker_pid: int
    report_fd: int
    started: float
    key: int
    """The run's key in the sensor's maps."""
    held: Held
    """The caller's `--out` and connection, to reach it if the worker is killed (orphan.py)."""
    events: int = 0
    drops: int = 0
    untracked: int = 0
    command_started: float = 0.0
    """Monotonic seconds when the command was let go (0: not reported yet)."""
    archive_ready_s: float = 0.0
    """From the command's exit to its archive delivered (0: not reported yet)."""


class Daemon:
    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.started = time.monotonic()
        self.sel = selectors.DefaultSelector()
        self.runs: dict[int, ActiveRun] = {}
        self.pending: dict[int, Pending] = {}
        self.stopping = False
        self.listener: socket.socket | None = None
        self.owns_socket = False
        self.sensor: SensorHandle | None = None
        self.spare: Spare | None = None
        """The next run's worker, forked ahead (runner/daemon/spare.py)."""
        self.wake_w: socket.socket | None = None
        self.shipper: Shipper | None = None
        """Pushes finished archives to `[ship] ref` (runner/ship/queue.py), when configured."""
        self.metrics = Metrics()
        self.endpoint = Endpoint(self.metrics, self.sel, config.request_timeout_s)

    # --- life cycle ----------------------------------------------------------------------------

    def serve(self) -> int:
        """Listen until SIGTERM, then end the runs and return 0 once the last worker is gone."""
        t0 = time.monotonic()
        self.sensor = sensor = SensorHandle(self.config.monitor)  # forked before any plumbing
        log.info("daemon.sensor_loaded", seconds=round(time.monotonic() - t0, 3),
                 ringbuf_pages=sensor.ringbuf_pages, sensor_pid=sensor.pid)
        try:
            worker.preload()
            fix_mount()  # the runs' cgroups go where the sensor linked the network programs, read once
            wake_r, wake_w = socket.socketpair()
            self.wake_w = wake_w
            wake_r.setblocking(False)
            wake_w.setblocking(False)
            signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                signal.signal(signum, lambda *_: None)  # handled from the wake-up pipe
            self.listener, self.owns_socket = listen(self.config)
            sweep()  # cgroups of workers (or a daemon) that died: logged as stale.cleaned
            remove_leftovers()  # their staging directories: no one is left to deliver them
            self.sel.register(self.listener, selectors.EVENT_READ, self._accept)
            self.sel.register(wake_r, selectors.EVENT_READ, self._on_signals)
            for scrape in metrics_listeners(self.config):
                self.endpoint.add_listener(scrape)
            self._new_spare()
            if self.config.ship.ref:
                self.shipper = Shipper(ShipQueue(Path(self.config.ship.queue_dir)), self.config.ship.ref,
                                       self.config.ship.plain_http)
                self.shipper.start()
            log.info("daemon.listening", socket=str(self.config.socket_path), pid=os.getpid(),
                     max_concurrent_runs=self.config.max_concurrent_runs,
                     floor=self.config.floor.name if self.config.floor else None)
            while not (self.stopping and not self.runs):
                for key, _ in self.sel.select(timeout=self._select_timeout()):
                    key.data(key.fileobj)
                self._expire(time.monotonic())
        finally:
            if self.shipper is not None:
                self.shipper.stop()
            if self.spare is not None:
                self.spare.close()
            sensor.close()
            if self.config.metrics_socket is not None:
                with contextlib.suppress(OSError):
                    self.config.metrics_socket.unlink()
        log.info("daemon.stopped")
        return 0

    def _on_signals(self, wake: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            signums = wake.recv(4096)
            if signal.SIGTERM in signums or signal.SIGINT in signums:
                self._stop()
        self._reap()

    def _stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        log.info("daemon.stopping", active_runs=len(self.runs))
        if self.listener is not None:
            self.sel.unregister(self.listener)
            self.listener.close()
            if self.owns_socket:  # systemd's socket stays for the next activation
                with contextlib.suppress(OSError):
                    self.config.socket_path.unlink()
        for fd in list(self.pending):
            self._drop(fd)
        if self.spare is not None:
            self.spare.close()
            self.spare = None
        for run in self.runs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(run.worker_pid, signal.SIGUSR1)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.sensor is not None and pid == self.sensor.pid:
                log.error("daemon.sensor_died", status=os.waitstatus_to_exitcode(status))
                self._stop()  # nothing can be observed any more: the runs end, their archives say so
                continue
            if self.spare is not None and pid == self.spare.pid:  # died before it was given a run
                log.warning("daemon.spare_died", status=os.waitstatus_to_exitcode(status))
                self.spare.close()
                self.spare = None
                if not self.stopping:
                    self._new_spare()
                continue
            run = self.runs.pop(pid, None)
            if run is not None:
                self._read_report(run)
                self.sel.unregister(run.report_fd)
                os.close(run.report_fd)
                assert self.sensor is not None
                self.sensor.end_run(run.key)
                log.info("run.ended", run_id=run.run_id, uid=run.peer.uid, worker=pid,
                         status=os.waitstatus_to_exitcode(status),
                         seconds=round(time.monotonic() - run.started, 3))
                self._count_finished(run, os.waitstatus_to_exitcode(status) == 0)
                if os.WIFSIGNALED(status):  # it could not remove its cgroup nor deliver: done here
                    recover_killed(run.run_id, pid, status, run.held)
                    tmp = run_tmp_path(run.peer.uid, run.run_id)  # nor its TMPDIR, unless in use again
                    if all(run_tmp_path(r.peer.uid, r.run_id) != tmp for r in self.runs.values()):
                        remove_run_tmp(tmp)
                run.held.close()

    def _count_finished(self, run: ActiveRun, ok: bool) -> None:
        m = self.metrics
        m.finished.labels("ok" if ok else "failed").inc()
        m.active.set(len(self.runs))
        m.drops.inc(run.drops)
        m.untracked.inc(run.untracked)
        if run.command_started:
            m.start_to_exec.observe(max(0.0, run.command_started - run.started))
        if run.archive_ready_s:
            m.archive_ready.observe(run.archive_ready_s)

    # --- connections ---------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        """Take every connection waiting in the backlog (a flood must not keep it full for others)."""
        for _ in range(BACKLOG):
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                return
            self._admit(conn)

    def _admit(self, conn: socket.socket) -> None:
        try:
            peer = peer_of(conn)
        except OSError as exc:  # e.g. more supplementary groups than we read
            log.warning("daemon.peer_unreadable", error=str(exc))
            conn.close()
            return
        not_allowed = refusal(peer, self.config.allowed_gids, self.config.allowed_groups)
        why = ("not_allowed", not_allowed) if not_allowed else self._connection_limit(peer)
        if why is not None:
            log.warning("daemon.refused", uid=peer.uid, pid=peer.pid, reason=why[1])
            self.metrics.refused.labels(why[0]).inc()
            _reply(conn, protocol.refused(why[1]))
            conn.close()
            return
        conn.setblocking(False)
        self.pending[conn.fileno()] = Pending(conn, peer, time.monotonic() + self.config.request_timeout_s)
        self.sel.register(conn, selectors.EVENT_READ, self._read_request)

    def _connection_limit(self, peer: Peer) -> tuple[str, str] | None:
        """(metrics reason, message) when `peer` may not open another connection now. Root never."""
        if peer.uid == 0:
            return None
        cap = self.config.max_connections_per_user
        if sum(p.peer.uid == peer.uid for p in self.pending.values()) >= cap:
            return "connections_per_user", (
                f"{peer.describe()} already has {cap} connections waiting to send their request, "
                f"the most one user may (limits.max_connections_per_user = {cap}); close some and try again")
        if sum(p.peer.uid != 0 for p in self.pending.values()) >= MAX_PENDING:
            return "pending_connections", (f"the daemon already has {MAX_PENDING} connections waiting to "
                                           "send their request, its limit; try again in a few seconds")
        return None

    def _select_timeout(self) -> float:
        """Wake up for the earliest request deadline (at most a second away)."""
        deadlines = [p.deadline for p in self.pending.values()]
        if (scrape := self.endpoint.next_deadline()) is not None:
            deadlines.append(scrape)
        return min(1.0, max(0.0, min(deadlines, default=1.0) - time.monotonic()))

    def _expire(self, now: float) -> None:
        """Refuse and close the connections whose request did not arrive in full in time."""
        late = (f"the request did not arrive in full within {self.config.request_timeout_s:g} s "
                "(the daemon's request deadline); connection closed")
        for pending in [p for p in self.pending.values() if p.deadline <= now]:
            self._refuse(pending, late, "request_deadline")
        self.endpoint.expire(now)

    def _drop(self, fd: int) -> None:
        pending = self.pending.pop(fd)
        self.sel.unregister(pending.conn)
        pending.reader.close()
        pending.conn.close()

    def _read_request(self, conn: socket.socket) -> None:
        pending = self.pending[conn.fileno()]
        try:
            pending.reader.feed(conn)
            body = pending.reader.frame()
            if body is None:
                if pending.reader.eof:
                    self._drop(conn.fileno())
                return
            msg = protocol.decode_client(body)
        except BlockingIOError:
            return
        except (protocol.ProtocolError, OSError) as exc:
            self._refuse(pending, str(exc), "bad_request")
            return
        if isinstance(msg, protocol.StatusQuery):
            self._answer_status(pending)
        elif isinstance(msg, protocol.RunStart):
            self._start_run(pending, msg)
        else:
            self._refuse(pending, "expected a run or status request first", "bad_request")

    def _refuse(self, pending: Pending, message: str, reason: str) -> None:
        """Say `message` and close; counted under `reason` (runner/daemon/metrics.py REASONS)."""
        log.warning("daemon.refused", uid=pending.peer.uid, pid=pending.peer.pid, reason=message)
        self.metrics.refused.labels(reason).inc()
        _reply(pending.conn, protocol.refused(message))
        self._drop(pending.conn.fileno())

    def _answer_status(self, pending: Pending) -> None:
        for run in self.runs.values():
            self._read_report(run)
        now = time.monotonic()
        runs = [protocol.RunInfo(run_id=r.run_id, caller_uid=r.peer.uid, caller_pid=r.peer.pid,
                                 age_s=round(now - r.started, 3), events=r.events, drops=r.drops,
                                 worker_pid=r.worker_pid)
                for r in sorted(self.runs.values(), key=lambda r: r.started)]
        pids = [os.getpid(), *([self.sensor.pid] if self.sensor else []), *self.runs]
        snapshot = self.metrics.snapshot()
        reply = status_reply(now - self.started, runs, pids, self.config, snapshot, self.shipper)
        _reply(pending.conn, reply)
        self._drop(pending.conn.fileno())

    # --- runs ----------------------------------------------------------------------------------

    def _run_limit(self, peer: Peer) -> tuple[str, str] | None:
        """(metrics reason, message) when `peer` may not start a run now (`max_runs_per_user`, then
        `max_concurrent_runs`), else None.

        Only live workers count. A killed worker's client sees its connection
        close before the daemon's loop reaps the worker, and may ask again at
        once: that worker is reaped now rather than held against the new run.
        Root's runs count against the daemon's limit, not a per-user one.
        """
        limit, per_user = self.config.max_concurrent_runs, self.config.max_runs_per_user
        mine = sum(r.peer.uid == peer.uid for r in self.runs.values())
        if len(self.runs) >= limit or (peer.uid != 0 and mine >= per_user):
            self._reap()
            mine = sum(r.peer.uid == peer.uid for r in self.runs.values())
        if peer.uid != 0 and mine >= per_user:
            return "runs_per_user", (f"{peer.describe()} already runs {mine} runs, the most one user may "
                                     f"(limits.max_runs_per_user = {per_user}); "
                                     "try again when one has finished")
        if len(self.runs) >= limit:
            return "concurrent_runs", (f"the daemon already runs {len(self.runs)} runs, its limit "
                                       f"(limits.max_concurrent_runs = {limit}); try again later")
        return None

    def _start_run(self, pending: Pending, msg: protocol.RunStart) -> None:
        fds = pending.reader.take_fds()
        problem: tuple[str, str] | None = None
        if len(fds) != len(protocol.RUN_FDS):
            problem = "bad_request", f"a run request needs the descriptors {', '.join(protocol.RUN_FDS)}"
        elif self.stopping:
            problem = "shutting_down", "the daemon is shutting down"
        else:
            problem = self._run_limit(pending.peer)
        assert self.sensor is not None
        if problem is None and self.spare is None:
            self._new_spare()  # the run's own worker (the descriptors it inherits are this run's)
            if self.spare is None:
                problem = "no_worker", ("the daemon could not fork a worker for this run (see its log); "
                                        "try again")
        if problem is None:
            try:
                key, worker_end = self.sensor.start_run()
            except RunnerError as exc:
                problem = "no_worker", str(exc)
        if problem is not None:
            for fd in fds:
                os.close(fd)
            self._refuse(pending, problem[1], problem[0])
            return
        report_r, report_w = (s.detach() for s in socket.socketpair())  # the worker's reports, our acks
        os.set_blocking(report_w, False)
        spare = self._take_spare(pending.conn, msg, fds, worker_end, report_w)
        os.close(report_w)
        worker_end.close()
        out_fd = fds[protocol.RUN_FDS.index("out_dir")]
        for fd in fds:
            if fd != out_fd:
                os.close(fd)
        if spare is None:
            os.close(out_fd)
            os.close(report_r)
            self.sensor.end_run(key)
            self._refuse(pending, "the daemon's spare worker died before it could take this run; try again",
                         "no_worker")
            return
        held = _held(pending, msg, out_fd)
        self._drop(pending.conn.fileno())  # the worker has the connection now
        pid = spare.pid
        self.runs[pid] = ActiveRun(run_id=msg.run_id, peer=pending.peer, worker_pid=pid,
                                   report_fd=report_r, started=time.monotonic(), key=key, held=held)
        self.sel.register(report_r, selectors.EVENT_READ, lambda _fd, r=self.runs[pid]: self._read_report(r))
        log.info("run.accepted", run_id=msg.run_id, uid=pending.peer.uid, caller_pid=pending.peer.pid,
                 worker=pid, active_runs=len(self.runs))
        self.metrics.started.inc()
        self.metrics.active.set(len(self.runs))
        # Only now: the next spare must hold none of this run's descriptors (its report pipe's read end
        # is registered by now, and a forked worker closes everything registered).
        if not self.stopping:
            self._new_spare()

    def _take_spare(self, conn: socket.socket, msg: protocol.RunStart, fds: list[int], channel: socket.socket,
                    report_w: int) -> Spare | None:
        """Hand the run to the spare worker; None if it died meanwhile (the reaper forks another)."""
        spare, self.spare = self.spare, None
        assert spare is not None
        try:
            spare.hand(conn, msg, fds, channel, report_w)
        except OSError as exc:
            log.warning("daemon.spare_lost", error=str(exc))
            spare.close()
            return None
        return spare

    def _new_spare(self) -> None:
        try:
            self.spare = self._fork_spare()
        except OSError as exc:  # e.g. out of memory: the next run forks its own
            log.warning("daemon.spare_failed", error=str(exc))

    def _fork_spare(self) -> Spare:
        assert self.sensor is not None
        sensor = self.sensor

        def become_worker(keep: socket.socket) -> None:
            self._become_worker(keep)
            sensor.control.close()  # the sensor must see the daemon go, not a worker holding on

        return fork_spare(become_worker, self._serve_run)

    def _serve_run(self, conn: socket.socket, fds: list[int], msg: protocol.RunStart, peer: Peer,
                   channel: socket.socket, report_w: int) -> int:
        """In a worker given its run: serve it; a crash is said to the client, never hidden."""
        conn.setblocking(True)
        try:
            return worker.serve_run(conn, fds, msg, peer, self.config, report_w, SharedSensor(channel))
        except BaseException as exc:
            log.error("run.crashed", error=repr(exc))
            with contextlib.suppress(Exception):
                worker.finish(conn, protocol.refused(f"internal error: {exc!r}"))
            return 1

    def _become_worker(self, keep: socket.socket) -> None:
        """In the forked worker: drop the daemon's loop, sockets and signal plumbing, and the
        descriptors other callers' pending requests brought (never a worker's business)."""
        signal.set_wakeup_fd(-1)
        if self.wake_w is not None:
            self.wake_w.close()
        for pending in self.pending.values():
            pending.reader.close()
        for run in self.runs.values():  # other callers' descriptors, held for their delivery
            run.held.close()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        for key in list(self.sel.get_map().values()):
            if key.fileobj is keep:
                continue
            with contextlib.suppress(OSError):
                key.fileobj.close() if isinstance(key.fileobj, socket.socket) else os.close(key.fd)
        self.sel.close()
        keep.setblocking(True)

    def _read_report(self, run: ActiveRun) -> None:
        """Everything the worker reported so far; its last report counts (writes are whole records)."""
        size = worker.REPORT.size
        with contextlib.suppress(BlockingIOError, OSError):
            os.set_blocking(run.report_fd, False)
            while len(data := os.read(run.report_fd, 64 * size)) >= size:
                for events, drops, untracked, started, ready in worker.REPORT.iter_unpack(
                        data[:len(data) - len(data) % size]):
                    if events == worker.LET_GO:  # delivered: the caller's --out is not ours to hold any more
                        run.held.let_go()
                        os.write(run.report_fd, worker.LET_GO_ACK)
                        continue
                    run.events, run.drops = events, drops
                    if ready:  # the final report
                        run.untracked, run.command_started, run.archive_ready_s = untracked, started, ready


def _held(pending: Pending, msg: protocol.RunStart, out_fd: int) -> Held:
    """What the daemon keeps of a run it hands to a worker (`out_fd` is its own from now on)."""
    try:
        creds = worker.command_credentials(msg, pending.peer)
    except RunnerError:
        creds = None  # the worker refuses the run: there will be nothing to deliver
    return Held(out_fd=out_fd, conn=pending.conn.dup(), out_display=msg.out_display, creds=creds)


def _reply(conn: socket.socket, msg: protocol.Refused | protocol.StatusReply) -> None:
    """A small answer from the main loop: it fits the socket buffer, so a short timeout is plenty."""
    conn.settimeout(1.0)
    try:
        conn.sendall(protocol.encode(msg))
    except OSError as exc:
        log.warning("daemon.reply_lost", error=str(exc))
