"""Who owns a run cgroup: a dead runner's is stale, a live (or maybe live) one's never is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runner.capture.owner import (
    Owner,
    alive,
    name_pid,
    read_record,
    records_dir,
    spool_name_ok,
    start_time,
    write_record,
)
from runner.errors import RunnerError


def test_a_live_runner_is_alive_and_a_reused_pid_is_not() -> None:
    me = os.getpid()
    start = start_time(me)
    assert start is not None  # a live process's start time is readable
    assert alive(Owner(pid=me, start=start))
    assert not alive(Owner(pid=me, start=start + 1))  # same pid, another process
    assert alive(Owner(pid=me, start=None))  # no record: a live pid is never taken as stale


def test_a_reaped_runner_is_dead() -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    start = start_time(pid)
    os.waitpid(pid, 0)
    assert not alive(Owner(pid=pid, start=start))
    assert not alive(Owner(pid=pid, start=None))


def test_a_zombie_runner_is_dead() -> None:
    """A killed runner whose parent is gone waits as a zombie until pid 1 reaps it: it has ended."""
    child = subprocess.Popen(["true"])
    start = start_time(child.pid)  # may already be a zombie: then there is nothing to compare
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert not alive(Owner(pid=child.pid, start=start))
    assert not alive(Owner(pid=child.pid, start=None))
    child.wait()


def test_the_name_gives_a_pid_and_foreign_names_none() -> None:
    assert name_pid(Path("run-1-2-4321-0a1b2c3d")) == 4321
    assert name_pid(Path("something-else")) is None


@pytest.mark.parametrize("name", ["../atk/victim-run-42.spool", "a/b.spool", "..spool", ".spool", "x.tar.gz",
                                  "run\n.spool", "/etc/passwd"])
def test_a_spool_name_from_a_record_must_be_a_run_ids_spool(name: str) -> None:
    assert not spool_name_ok(name)


def test_a_spool_name_of_a_run_id_is_accepted() -> None:
    assert spool_name_ok("victim-run-42.spool")


def test_records_are_kept_in_a_private_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_RUNNER_OWNERS_DIR", str(tmp_path / "owners"))
    assert records_dir("parent", create=False) == tmp_path / "owners" / "parent"  # a reader makes nothing
    assert not (tmp_path / "owners").exists()
    directory = records_dir("parent")
    assert directory == tmp_path / "owners" / "parent"
    assert (directory.stat().st_mode & 0o777, (tmp_path / "owners").stat().st_mode & 0o777) == (0o700, 0o700)
    owner = Owner(pid=1, start=2, cgroup="/sys/fs/cgroup/x/run-1-0a1b2c3d")
    assert read_record(write_record(directory, 77, owner)) == owner
    directory.chmod(0o755)  # open to others: someone else may have planted records
    with pytest.raises(RunnerError, match="mode 0700"):
        records_dir("parent")
