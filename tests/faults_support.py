"""One fault test's runs of the runner, and what they leave on the machine (kernel tests).

Each test's runs carry a token of their own in their environment and cgroup parent, so
a concurrent test's runs, and its runners that died, are never seen or swept.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.capture.cgroup import PARENT_ENV, RunCgroup
from runner.capture.limits import V1_FILES, v1_mount
from runner.capture.owner import records_dir
from runner.host.mounts import cgroup2_mount
from spool.format import Batch, SpoolError, iter_frames
from tests.support import CLI, runner_env

WAIT_S = 180
"""Upper bound for the runner's set-up on a shared machine (a BCC compile); never a timed assertion."""


class Job:
    """One test's runs: its token, its cgroup parent, the leftovers it checks."""

    def __init__(self, tmp_path: Path) -> None:
        self.token = f"faults-{secrets.token_hex(6)}"
        self.tmp = tmp_path
        self.env = runner_env(**{PARENT_ENV: self.token, "FAULTS_TOKEN": self.token})
        self.out = tmp_path / "out"

    def parents(self) -> list[Path]:
        mounts = [cgroup2_mount(), *(m for m in (v1_mount(n) for n in V1_FILES) if m is not None)]
        return [m / self.token for m in mounts]

    def start(self, run_id: str, *cmd: str | Path, out: Path | None = None,
              options: tuple[str, ...] = ()) -> subprocess.Popen[str]:
        """The runner in its own session (so a group signal reaches only it and its command)."""
        return subprocess.Popen(
            [*CLI, "run", "--direct", "--out", str(out or self.out), "--run-id", run_id, *options, "--",
             *map(str, cmd)],
            env=self.env, cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)

    def run(self, run_id: str, *cmd: str | Path, out: Path | None = None,
            options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        runner = self.start(run_id, *cmd, out=out, options=options)
        stdout, stderr = runner.communicate(timeout=WAIT_S)
        return subprocess.CompletedProcess(runner.args, runner.returncode, stdout, stderr)

    def run_cgroups(self) -> list[Path]:
        return [p for parent in self.parents() if parent.is_dir() for p in parent.iterdir() if p.is_dir()]

    def processes(self) -> list[int]:
        """Live processes whose environment carries the token (the runner's, its command's)."""
        found = []
        needle = f"FAULTS_TOKEN={self.token}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle in (entry / "environ").read_bytes() and _state(int(entry.name)) != "Z":
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def assert_clean(self, programs: set[int] | None = None) -> None:
        """Nothing of the test's runs is left: processes, run cgroups, BPF programs (after their release)."""
        programs = programs or set()
        deadline = time.monotonic() + WAIT_S
        while (self.processes() or attached(programs)) and time.monotonic() < deadline:
            time.sleep(0.2)  # the monitor's background release takes about 1.5 s
        assert self.processes() == []
        assert attached(programs) == set()
        assert self.run_cgroups() == []
        records = records_dir(self.token, create=False)
        assert not records.exists() or list(records.iterdir()) == [], "a run left its owner record"

    def cleanup(self) -> None:
        """The test's own cgroup parents (empty once assert_clean passed)."""
        for parent in self.parents():
            if parent.is_dir():
                parent.rmdir()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    j = Job(tmp_path)
    try:
        yield j
    finally:
        for pid in j.processes():  # a failed test must not leave its command running
            os.kill(pid, signal.SIGKILL)
        for cg in j.run_cgroups():
            RunCgroup(path=cg, id=0, level=0).remove()
        shutil.rmtree(records_dir(j.token, create=False), ignore_errors=True)  # a failed test's records
        j.cleanup()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def bpftool() -> str:
    path = shutil.which("bpftool")
    if path is None:
        pytest.fail("bpftool is missing: 'make setup' installs it (apt package bpftool)")
    return path


def attached(ids: set[int]) -> set[int]:
    """Which of the program ids still exist in the kernel."""
    if not ids:
        return set()
    proc = subprocess.run([bpftool(), "--json", "prog", "show"], capture_output=True, text=True, check=True)
    return ids & {p["id"] for p in json.loads(proc.stdout)}


def program_ids(pid: int) -> set[int]:
    """The BPF programs process `pid` holds open (fdinfo of its bpf-prog fds)."""
    ids = set()
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = info.read_text()
        except OSError:
            continue
        ids |= {int(line.split()[1]) for line in text.splitlines() if line.startswith("prog_id:")}
    return ids


def wait_for(path: Path, runner: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """Until `path` exists (the command reached that point); the runner must still be running."""
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert runner.poll() is None, runner.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def running(job: Job, run_id: str, script: str) -> tuple[subprocess.Popen[str], set[int]]:
    """Start `script` under the runner and wait until it has touched $MARK; the runner's programs."""
    mark = job.tmp / f"{run_id}.mark"
    runner = job.start(run_id, "/bin/sh", "-c", script.replace("$MARK", str(mark)))
    wait_for(mark, runner)
    programs = program_ids(runner.pid)
    assert programs, "the runner holds no BPF program while the command runs"
    return runner, programs


def spooled_records(partial: Path) -> bytes:
    """The raw records of the whole Batch frames in a spool being written (a torn last frame skipped).

    Not the file's bytes: the header holds the command line, so a path the
    script names is in the file before any record of the command is.
    """
    records: list[bytes] = []
    with contextlib.suppress(SpoolError), open(partial, "rb") as f:
        records += (r for frame in iter_frames(f) if isinstance(frame, Batch) for r in frame.records)
    return b"".join(records)
