"""One loaded monitor, two runs, on the real kernel: records and drops go to the run they belong to.

The ring is 64 KiB (about 500 short records) and nobody reads it while
run A floods it with 5000 opens, so A's writes fail; then the ring is
drained and run B does its 20 opens (well under the ring's size). A's
drops are A's alone, B's counters are clean, and each
run received exactly its own records (its own marker, never the other's),
as many as the kernel counted as emitted for it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ebpf.monitor import Monitor, MonitorConfig, RunLedger
from ebpf.observer import Observer
from ebpf.wire import RUN, RUN_OFFSET, RUN_SLOTS
from runner.capture.cgroup import RunCgroup

pytestmark = pytest.mark.kernel

OPENER = """
import os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
for _ in range(int(sys.argv[3])):
    os.close(os.open(sys.argv[2], os.O_RDONLY | os.O_CREAT, 0o600))
"""

LATE = """
import os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
sys.stdout.write("in\\n")
sys.stdout.flush()
sys.stdin.readline()
open(sys.argv[2], "w").close()
"""


@pytest.fixture
def monitor() -> Iterator[Monitor]:
    m = Monitor(MonitorConfig(ringbuf_pages=16), lambda _r: None)
    try:
        yield m
    finally:
        m.close()


def _run_in(cgroup: RunCgroup, marker: Path, opens: int) -> None:
    subprocess.run(["/usr/bin/python3", "-c", OPENER, str(cgroup.path), str(marker), str(opens)],
                   check=True, timeout=120)


def test_a_flooding_run_drops_only_its_own_records(monitor: Monitor, tmp_path: Path) -> None:
    a_key, b_key = 1, 2 + 5 * RUN_SLOTS  # B on a later generation of slot 2
    a_cg, b_cg = RunCgroup.create("observer-a"), RunCgroup.create("observer-b")
    got: dict[int, list[bytes]] = {a_key: [], b_key: []}
    observer = Observer(monitor)
    try:
        ledgers = {}
        for key, cg in ((a_key, a_cg), (b_key, b_cg)):
            observer.open_run(key, got[key].append)
            ledgers[key] = RunLedger(monitor, key)
            monitor.add_run(key, cg.id, None)
        a_marker, b_marker = tmp_path / "marker-of-a", tmp_path / "marker-of-b"
        _run_in(a_cg, a_marker, 5000)  # nobody reads: the ring overflows
        observer.drain()
        _run_in(b_cg, b_marker, 20)
        observer.drain()
        a, b = ledgers[a_key].counters(), ledgers[b_key].counters()
        assert a.drops["open"] > 0
        assert sum(b.drops.values()) == 0 and b.untracked == 0
        for key, counters in ((a_key, a), (b_key, b)):
            assert all(RUN.unpack_from(r, RUN_OFFSET)[0] == key for r in got[key])
            assert len(got[key]) == sum(counters.emitted.values())
        assert any(bytes(b_marker) in r for r in got[b_key])
        assert not any(bytes(a_marker) in r for r in got[b_key])
        assert not any(bytes(b_marker) in r for r in got[a_key])
        assert sum(1 for r in got[b_key] if bytes(b_marker) in r) == 20
    finally:
        for key in got:
            monitor.remove_run(key)
        a_cg.remove()
        b_cg.remove()


def test_ending_a_run_forgets_its_tasks(monitor: Monitor, tmp_path: Path) -> None:
    """A task that outlives its run's end is not tracked for whoever gets the slot next."""
    cg = RunCgroup.create("observer-end")
    got: list[bytes] = []
    observer = Observer(monitor)
    observer.open_run(3, got.append)
    sleeper = None
    try:
        monitor.add_run(3, cg.id, None)
        sleeper = subprocess.Popen(["/usr/bin/python3", "-c", LATE, str(cg.path), str(tmp_path / "late")],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert sleeper.stdout is not None and sleeper.stdin is not None
        assert sleeper.stdout.readline() == "in\n"
        assert monitor.remove_run(3) >= 1
        observer.drain()
        before = len(got)
        sleeper.stdin.write("go\n")
        sleeper.stdin.flush()
        assert sleeper.wait(timeout=60) == 0
        observer.drain()
        assert len(got) == before and observer.orphans == 0
        assert not any(b"late" in r for r in got)
    finally:
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        cg.remove()
