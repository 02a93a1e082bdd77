"""The daemon's `[ship]`: every finished archive reaches the registry, and none is lost while
the registry is away, across a daemon restart too (runner/ship/queue.py).

A real daemon (its own socket, its own queue directory) and a real registry
(tests/registry_support.py) per test; waiting is polling with a deadline.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.daemon_support import CLI, DaemonProcess, shared_tmp
from tests.registry_support import Registry
from tests.support import unique_run_id

pytestmark = pytest.mark.kernel
DEADLINE_S = 90.0


def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def root() -> Iterator[Path]:
    path = shared_tmp()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _config(registry: Registry, root: Path) -> str:
    return f'[ship]\nref = "{registry.host}/fleet/evidence"\nqueue_dir = "{root / "ship"}"\n'


def _run(service: DaemonProcess, out: Path, run_id: str) -> Path:
    out.mkdir(exist_ok=True)
    done = subprocess.run([*CLI, "run", "--daemon", "--socket", service.socket, "--out", out,
                           "--run-id", run_id, "--", "sh", "-c", "echo shipped > /dev/null"],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr + service.logs()[-3000:]
    return out / f"{run_id}.tar.gz"


def _status(service: DaemonProcess) -> str:
    done = subprocess.run([*CLI, "daemon", "status", "--socket", service.socket], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _pull_equals(registry: Registry, run_id: str, archive: Path, into: Path) -> None:
    into.mkdir()
    done = subprocess.run([*CLI, "pull", f"{registry.host}/fleet/evidence:{run_id}", into],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (into / f"{run_id}.tar.gz").read_bytes() == archive.read_bytes()
    valid = subprocess.run([*CLI, "validate", into / f"{run_id}.tar.gz"], capture_output=True, text=True,
                           check=False)  # fmt: skip
    assert valid.returncode == 0, valid.stdout


def _queued(root: Path) -> list[Path]:
    return sorted((root / "ship").glob("*.tar.gz"))


def test_a_daemon_run_lands_in_the_registry(root: Path) -> None:
    registry = Registry(root / "registry").start()
    try:
        service = DaemonProcess(root, _config(registry, root))
        try:
            run_id = unique_run_id("ship")
            archive = _run(service, root / "out", run_id)
            _until(lambda: "1 pushed, 0 waiting" in _status(service), "the push")
            assert _queued(root) == []
        finally:
            service.stop()
        _pull_equals(registry, run_id, archive, root / "pulled")
    finally:
        registry.stop()


def test_an_archive_waits_for_the_registry_across_a_daemon_restart(root: Path) -> None:
    registry = Registry(root / "registry")  # not started: its port is free, pushes are refused
    service = DaemonProcess(root, _config(registry, root))
    try:
        run_id = unique_run_id("wait")
        archive = _run(service, root / "out", run_id)
        _until(lambda: "attempt 1:" in _status(service), "a failed push attempt")
        status = _status(service)
        assert f"waiting {run_id}" in status and "unreachable" in status
        assert len(_queued(root)) == 1
    finally:
        service.stop()
    assert len(_queued(root)) == 1  # the daemon stopped with the archive still waiting: kept
    registry.start()
    try:
        service = DaemonProcess(root, _config(registry, root))
        try:
            _until(lambda: _queued(root) == [], "the queue to empty after the restart")
            assert "1 pushed, 0 waiting" in _status(service)
        finally:
            service.stop()
        _pull_equals(registry, run_id, archive, root / "pulled")
    finally:
        registry.stop()
