"""What an operator scrapes: the daemon's counters in Prometheus's text format, and in `daemon status`.

The numbers live in one `prometheus_client` registry of the daemon's main
loop (single-threaded: no locks needed, none taken but the library's own).
They are served over HTTP on a root-only unix socket (`metrics.socket`,
0600: `curl --unix-socket /run/assay-runner/metrics.sock http://localhost/metrics`)
and, when configured, on a local TCP port (`metrics.port`, 127.0.0.1 only),
both by the main loop's selector: a scraper is one more non-blocking peer,
held to the same request deadline as a client.

- `assay_runner_runs_started_total`, `assay_runner_runs_finished_total{result}`
  (`ok`: the worker served the run; `failed`: it refused or crashed);
- `assay_runner_runs_refused_total{reason}`: refused by the main loop, by
  which limit or check (`REASONS`);
- `assay_runner_ring_drops_total`, `assay_runner_untracked_tasks_total`: the
  finished runs' ring-buffer drops and tasks the kernel's map did not take;
- `assay_runner_active_runs`;
- `assay_runner_start_to_exec_seconds`: from the request's arrival to the
  command's start; `assay_runner_archive_ready_seconds`: from the command's
  exit to its archive being in the caller's `--out`.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REASONS = ("not_allowed", "connections_per_user", "pending_connections", "request_deadline", "bad_request",
           "runs_per_user", "concurrent_runs", "shutting_down", "no_worker")
"""Why the main loop refused a connection or a request (each a label value, known up front)."""
MAX_SCRAPERS = 16
"""Scrapers served at once; more are closed at once (any local user can reach `metrics.port`)."""
REQUEST_MAX = 8192
"""Bytes of an HTTP request we read before answering (the path and headers do not matter)."""
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The daemon's counters, histograms and gauge."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.started = Counter("assay_runner_runs_started", "Runs handed to a worker.", registry=registry)
        self.finished = Counter("assay_runner_runs_finished", "Run workers that ended, by result.",
                                ["result"], registry=registry)
        self.refused = Counter("assay_runner_runs_refused", "Connections or requests refused by the daemon.",
                               ["reason"], registry=registry)
        self.drops = Counter("assay_runner_ring_drops", "Ring-buffer records lost by finished runs.",
                             registry=registry)
        self.untracked = Counter("assay_runner_untracked_tasks", "Tasks of finished runs the kernel's task "
                                 "map did not take.", registry=registry)
        self.active = Gauge("assay_runner_active_runs", "Runs in progress.", registry=registry)
        self.start_to_exec = Histogram("assay_runner_start_to_exec_seconds", "From a run request's arrival "
                                       "to the command's start.", buckets=_BUCKETS, registry=registry)
        self.archive_ready = Histogram("assay_runner_archive_ready_seconds", "From the command's exit to its "
                                       "archive in the caller's --out.", buckets=_BUCKETS, registry=registry)
        for result in ("ok", "failed"):
            self.finished.labels(result)
        for reason in REASONS:
            self.refused.labels(reason)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    def snapshot(self) -> dict[str, float]:
        """Every sample by name and labels (`name{label="v"}`), for `daemon status --json`."""
        out: dict[str, float] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out


class Endpoint:
    """HTTP on the metrics sockets, served by the daemon's selector; one answer per connection."""

    def __init__(self, metrics: Metrics, sel: selectors.BaseSelector, deadline_s: float) -> None:
        self._metrics = metrics
        self._sel = sel
        self._deadline_s = deadline_s
        self._peers: dict[socket.socket, tuple[float, bytearray]] = {}

    def add_listener(self, listener: socket.socket) -> None:
        self._sel.register(listener, selectors.EVENT_READ, self._accept)

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(64):
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                return
            if len(self._peers) >= MAX_SCRAPERS:
                conn.close()
                continue
            conn.setblocking(False)
            self._peers[conn] = (time.monotonic() + self._deadline_s, bytearray())
            self._sel.register(conn, selectors.EVENT_READ, self._read)

    def _read(self, conn: socket.socket) -> None:
        _, buf = self._peers[conn]
        try:
            chunk = conn.recv(REQUEST_MAX)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        buf += chunk
        if chunk and b"\r\n\r\n" not in buf and len(buf) < REQUEST_MAX:
            return
        if chunk:
            self._answer(conn, buf)
        self._close(conn)

    def _answer(self, conn: socket.socket, request: bytes | bytearray) -> None:
        if request.startswith((b"GET /metrics ", b"GET / ")):
            body, status, kind = self._metrics.text(), "200 OK", CONTENT_TYPE_LATEST
        else:
            body, status, kind = b"GET /metrics\n", "404 Not Found", "text/plain; charset=utf-8"
        head = f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
        conn.settimeout(1.0)  # a few KiB: they fit the socket buffer
        with contextlib.suppress(OSError):
            conn.sendall(head.encode() + body)

    def _close(self, conn: socket.socket) -> None:
        self._sel.unregister(conn)
        del self._peers[conn]
        conn.close()

    def expire(self, now: float) -> None:
        for conn in [c for c, (deadline, _) in self._peers.items() if deadline <= now]:
            self._close(conn)

    @property
    def scrapers(self) -> int:
        """Scraper connections open now."""
        return len(self._peers)

    def next_deadline(self) -> float | None:
        return min((deadline for deadline, _ in self._peers.values()), default=None)
