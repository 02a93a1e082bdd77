"""Direct mode's live normalizer process (runner/capture/live_process.py) in real runs.

Each run's command waits for a file the test creates, so the test can look
at the live process while the command runs: it is the runner's child, not
in the command's cgroup, in a session of its own, with the runner's uid; it
is gone once the runner returns, and leaves nothing in TMPDIR. A live
process killed mid-run makes the session normalize the finished spool
(`offline_live_failed`), and the archive is still published, with the same
bytes `assay-runner normalize` gives.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import CLI, Archive, assay, runner_env, unique_run_id

pytestmark = pytest.mark.kernel
CHILD_MODULE = "runner.capture.live_child"


@dataclass
class LiveRun:
    """A direct run whose command waits for `go`; `child` is its live process, found while it waits."""

    proc: subprocess.Popen[str]
    out: Path
    run_id: str
    go: Path
    tmpdir: Path
    command_cgroup: Path
    child: int = 0

    def finish(self) -> tuple[int, str]:
        self.go.touch()
        _, stderr = self.proc.communicate(timeout=120)
        return self.proc.returncode, stderr


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _session(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


def _live_child(parent: int, within: float = 30.0) -> int:
    """The pid of `parent`'s live normalizer process (waits for it to appear)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if (int(_status(int(entry.name))["PPid"]) == parent
                        and CHILD_MODULE.encode() in (entry / "cmdline").read_bytes()):
                    return int(entry.name)
            except (OSError, KeyError):
                continue  # ended meanwhile
        time.sleep(0.05)
    raise AssertionError(f"no live normalizer process under {parent}")


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[LiveRun]:
    run_id = unique_run_id("liveproc")
    go, cgroup, tmpdir = tmp_path / "go", tmp_path / "command-cgroup", tmp_path / "tmp"
    tmpdir.mkdir()
    script = (f"cat /proc/self/cgroup > {cgroup}.tmp && mv {cgroup}.tmp {cgroup}; cat /etc/hostname; "
              f"while [ ! -e {go} ]; do sleep 0.02; done; cat /etc/hostname")
    proc = subprocess.Popen([*CLI, "--log-format", "json", "run", "--out", str(tmp_path / "out"),
                             "--run-id", run_id, "--force", "--", "sh", "-c", script],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=runner_env(TMPDIR=str(tmpdir)))
    run = LiveRun(proc, tmp_path / "out", run_id, go, tmpdir, cgroup)
    try:
        run.child = _live_child(proc.pid)
        yield run
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_the_live_process_is_on_by_default_outside_the_command_and_leaves_nothing(live_run: LiveRun) -> None:
    deadline = time.monotonic() + 30
    while not live_run.command_cgroup.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    command = set(live_run.command_cgroup.read_text().splitlines())
    child = set(Path(f"/proc/{live_run.child}/cgroup").read_text().splitlines())
    assert any(live_run.run_id in line for line in command)
    assert not any(live_run.run_id in line for line in child)  # not in the run's cgroup
    status = _status(live_run.child)
    assert status["Uid"].split() == _status(live_run.proc.pid)["Uid"].split()  # the runner's credentials
    assert _session(live_run.child) != _session(live_run.proc.pid)  # a Ctrl-C is the runner's to handle
    code, stderr = live_run.finish()
    assert code == 0, stderr
    assert '"normalized_by": "live"' in stderr
    after = json.loads(next(line for line in stderr.splitlines() if '"run.after_exit"' in line))
    assert after["live_peak_rss_mib"] > 0 and after["runner_peak_rss_mib"] > 0  # each process its own
    assert _gone(live_run.child)
    assert list(live_run.tmpdir.iterdir()) == []
    Archive(live_run.out / f"{live_run.run_id}.tar.gz")  # passes conformance


def test_a_killed_live_process_falls_back_to_the_offline_pass(live_run: LiveRun, tmp_path: Path) -> None:
    subprocess.run(["kill", "-KILL", str(live_run.child)], check=True)
    code, stderr = live_run.finish()
    assert code == 0, stderr
    assert '"normalized_by": "offline_live_failed"' in stderr
    assert '"normalize.live_failed"' in stderr and "exit status -9" in stderr
    archive = live_run.out / f"{live_run.run_id}.tar.gz"
    Archive(archive)
    again = tmp_path / "again.tar.gz"
    proc = assay("normalize", live_run.out / f"{live_run.run_id}.spool", "--out", again)
    assert proc.returncode == 0, proc.stderr
    assert again.read_bytes() == archive.read_bytes()
    assert _gone(live_run.child) and list(live_run.tmpdir.iterdir()) == []
