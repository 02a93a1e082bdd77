"""Who owns a run cgroup: a dead runner's is stale, a live (or maybe live) one's never is."""

from __future__ import annotations

import os
from pathlib import Path

from runner.capture.owner import Owner, alive, read_owner, start_time


def test_a_live_runner_is_alive_and_a_reused_pid_is_not() -> None:
    me = os.getpid()
    assert alive(Owner(pid=me, start=start_time(me)))
    assert not alive(Owner(pid=me, start=start_time(me) + 1))  # same pid, another process
    assert alive(Owner(pid=me, start=None))  # no record: a live pid is never taken as stale


def test_a_reaped_runner_is_dead() -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    start = start_time(pid)
    os.waitpid(pid, 0)
    assert not alive(Owner(pid=pid, start=start))
    assert not alive(Owner(pid=pid, start=None))


def test_without_a_record_the_name_gives_the_pid_and_foreign_names_are_left_alone(tmp_path: Path) -> None:
    ours = tmp_path / "run-1-2-4321-0a1b2c3d"
    foreign = tmp_path / "something-else"
    for d in (ours, foreign):
        d.mkdir()
    assert read_owner(ours) == Owner(pid=4321, start=None)
    assert read_owner(foreign) is None
