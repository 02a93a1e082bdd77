"""The metrics endpoint without a daemon: HTTP answers, Prometheus text, bounded scrapers."""

from __future__ import annotations

import selectors
import socket
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from runner.daemon.metrics import MAX_SCRAPERS, REASONS, Endpoint, Metrics


def _serve(sel: selectors.BaseSelector, endpoint: Endpoint, until: float) -> None:
    while time.monotonic() < until:
        for key, _ in sel.select(timeout=0.05):
            key.data(key.fileobj)
        endpoint.expire(time.monotonic())


def _get(path: Path, request: bytes, sel: selectors.BaseSelector, endpoint: Endpoint) -> bytes:
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(path))
        client.sendall(request)
        _serve(sel, endpoint, time.monotonic() + 0.3)
        client.settimeout(5)
        data = b""
        while chunk := client.recv(65536):
            data += chunk
    return data


def test_the_endpoint_serves_prometheus_text_and_bounds_its_scrapers(tmp_path: Path) -> None:
    metrics = Metrics()
    metrics.started.inc(3)
    metrics.refused.labels("runs_per_user").inc()
    metrics.start_to_exec.observe(0.02)
    sel = selectors.DefaultSelector()
    endpoint = Endpoint(metrics, sel, deadline_s=0.5)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "m.sock"))
    listener.listen(64)
    listener.setblocking(False)
    endpoint.add_listener(listener)

    data = _get(tmp_path / "m.sock", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", sel, endpoint)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK") and b"Content-Length: %d" % len(body) in head
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(body.decode()) for s in family.samples}
    assert samples[("assay_runner_runs_started_total", ())] == 3
    assert samples[("assay_runner_runs_refused_total", (("reason", "runs_per_user"),))] == 1
    assert {dict(labels)["reason"] for name, labels in samples if name == "assay_runner_runs_refused_total"} \
        == set(REASONS)  # every reason is there from the start, at 0
    assert samples[("assay_runner_start_to_exec_seconds_count", ())] == 1
    assert metrics.snapshot()["assay_runner_runs_started_total"] == 3

    assert _get(tmp_path / "m.sock", b"GET /other HTTP/1.0\r\n\r\n", sel, endpoint).startswith(
        b"HTTP/1.0 404 Not Found")

    idle = [socket.socket(socket.AF_UNIX) for _ in range(MAX_SCRAPERS + 4)]
    for sock in idle:
        sock.connect(str(tmp_path / "m.sock"))
    _serve(sel, endpoint, time.monotonic() + 0.2)
    assert endpoint.scrapers == MAX_SCRAPERS  # the others were closed at once
    _serve(sel, endpoint, time.monotonic() + 0.6)
    assert endpoint.scrapers == 0 and endpoint.next_deadline() is None  # and these at the deadline
    for sock in idle:
        sock.settimeout(5)
        assert sock.recv(1) == b""
        sock.close()
    listener.close()
