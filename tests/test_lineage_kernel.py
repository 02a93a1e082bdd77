"""The lineage map on the real kernel: a full map is counted, never silent."""

from __future__ import annotations

import subprocess

import pytest

from ebpf.monitor import RUN_KEY, TASKS_MAX, Monitor, MonitorConfig
from runner.capture.cgroup import RunCgroup

pytestmark = pytest.mark.kernel

CHILDREN = 8
FORKER = f"""
import os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
ended, forked = os.pipe()
pids = []
for _ in range({CHILDREN}):
    pid = os.fork()
    if pid == 0:  # lives until every sibling is forked: all of them are live at once
        os.close(forked)
        os.read(ended, 1)
        os._exit(0)
    pids.append(pid)
os.close(forked)  # the children's read ends: every one has been forked
for pid in pids:
    os.waitpid(pid, 0)
"""


def _untracked(tasks_max: int) -> int:
    cgroup = RunCgroup.create("lineage-full")
    monitor = Monitor(MonitorConfig(ringbuf_pages=1, tasks_max=tasks_max), lambda _r: None)
    try:
        monitor.add_run(RUN_KEY, cgroup.id, None)
        subprocess.run(["/usr/bin/python3", "-c", FORKER, str(cgroup.path)], check=True, timeout=60)
        return monitor.counters(RUN_KEY).untracked
    finally:
        monitor.close()
        cgroup.remove()


def test_a_full_lineage_map_counts_every_task_it_could_not_take() -> None:
    """A map of 4 slots: the joiner takes one, so at least 5 of 8 live children go untracked."""
    assert CHILDREN - 3 <= _untracked(4) <= CHILDREN


def test_a_map_with_room_tracks_them_all() -> None:
    assert _untracked(TASKS_MAX) == 0
