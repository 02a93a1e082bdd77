"""The docker side of the image smoke test: a daemon, the build, the documented run line.

Kept apart from the test so the test reads as the user's steps: build with
`make image`, then `doctor` and `run` with the line docs/setup.md shows.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import ROOT

SETUP_DOC = ROOT / "docs" / "setup.md"
RUN_LINE_MARKER = "<!-- docker-run-line: tests/test_image.py runs this block -->"
DOCUMENTED_IMAGE = "assay-runner:latest"
DOCUMENTED_CACHE = "assay-runner-bpf-cache"
"""The documented named volume of the BPF cache; a test run uses its own (`cache_volume`)."""


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, check=False,
    )


def _daemon_answers() -> bool:
    return docker("info", "--format", "{{.ServerVersion}}", timeout=30).returncode == 0


LOCK = Path("/run/assay-runner-tests-docker.lock")
"""Held shared by every test session using the docker daemon, exclusively by one deciding to start it."""
STARTED = Path("/run/assay-runner-tests-dockerd.pid")
"""The pid of a dockerd a test session started: the last session using it stops it."""


@contextmanager
def docker_daemon(log: Path, startup: float = 60) -> Iterator[str]:
    """A docker daemon for the test: the running one, else one started here.

    A daemon a test started is stopped again (SIGTERM, which also stops the
    containerd it started), by the last test session using it: sessions on
    one host (xdist workers, other checkouts' suites) share the daemon, and
    stopping it under another session's build kills that build (exit 137).
    Its data stays in /var/lib/docker, so the layer cache makes the next
    build fast. Yields how the daemon was obtained.
    """
    missing = [tool for tool in ("docker", "dockerd") if shutil.which(tool) is None]
    if missing:
        raise AssertionError(f"{' and '.join(missing)} not found: 'make setup' installs docker.io")
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = None if _daemon_answers() else _start_dockerd(log, startup)
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield "already running" if proc is None else f"started (pid {proc.pid})"
        finally:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # another session still uses it: the last one stops it
            else:
                _stop_started(proc)


def _start_dockerd(log: Path, startup: float) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        proc = subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + startup
    while not _daemon_answers():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"dockerd did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.5)
    STARTED.write_text(f"{proc.pid}\n")
    return proc


def _stop_started(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop the dockerd a test session started (ours, or another's that ended first), if any."""
    try:
        pid = int(STARTED.read_text())
    except (OSError, ValueError):
        return
    STARTED.unlink()
    if proc is not None and proc.pid == pid:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return
    comm = Path(f"/proc/{pid}/comm")
    with contextlib.suppress(OSError):
        if comm.read_text().strip() != "dockerd":
            return  # that session's daemon is gone and the pid is someone else's
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.2)


def _running(pid: int) -> bool:
    """Not gone and not a zombie (a session that started it and still runs reaps it only at exit)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def checkout_tag() -> str:
    """A tag per checkout: concurrent test runs of two checkouts never swap images."""
    return f"assay-runner:test-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}"


def documented_run_line() -> list[str]:
    """The `docker run` options from docs/setup.md, up to and including the image.

    The doc's block is parsed, not copied, so the line users read is the
    line the test runs. It ends `IMAGE COMMAND...`; the command is the test's.
    """
    text = SETUP_DOC.read_text()
    _, found, after = text.partition(RUN_LINE_MARKER)
    assert found, f"{SETUP_DOC} lost the marker {RUN_LINE_MARKER!r}"
    block = after.split("```", 2)[1].removeprefix("sh\n").removeprefix("\n")
    words = shlex.split(block.replace("\\\n", " "))
    assert words[:2] == ["docker", "run"], block
    return words[2:words.index(DOCUMENTED_IMAGE) + 1]


def cache_volume() -> str:
    """This test process's BPF cache volume: a docker volume is host-global, another session's tests
    must not share or remove it."""
    return f"{DOCUMENTED_CACHE}-test-{os.getpid()}"


def run_line(image: str, runs: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """The documented options with `$PWD/runs` at `runs`, the test's cache volume and image tag."""
    out = []
    for word in documented_run_line():
        word = word.replace("$PWD/runs", str(runs)).replace(f"{DOCUMENTED_CACHE}:", f"{cache_volume()}:")
        out.append(image if word == DOCUMENTED_IMAGE else word)
    return [*out[:-1], *extra, out[-1]]
