"""The C ring consumer on the real kernel: every record the kernel emitted reaches the run's
buffer, none at a moderate rate is dropped, and under forced overflow the drop counters
account exactly for what is missing."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ebpf import ringsink
from ebpf.monitor import RUN_KEY, Monitor, MonitorConfig
from ebpf.wire import HEADER, HOOK_OPEN
from runner.capture.cgroup import RunCgroup
from spool.format import batch_head
from tests.spool_frames import batch_frames

pytestmark = pytest.mark.kernel

OPENER = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
/* opener PROCS DIR N EVERY: join the cgroup (writing our pid to PROCS), then make exactly N
 * failed opens of DIR/ringsink-miss-I, sleeping 2 ms after every EVERY (0: never). */
int main(int argc, char **argv)
{
    if (argc != 5) return 2;
    FILE *procs = fopen(argv[1], "w");
    if (!procs || fprintf(procs, "%d\n", (int)getpid()) < 0 || fclose(procs) != 0) return 3;
    long n = atol(argv[3]), every = atol(argv[4]);
    char path[4096];
    struct timespec pause = {0, 2000000};
    for (long i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/ringsink-miss-%ld", argv[2], i);
        if (open(path, O_RDONLY) >= 0) return 4;
        if (every && (i + 1) % every == 0) nanosleep(&pause, NULL);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def opener(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert ringsink.available(), "ebpf/_ringsink.so is missing or older than ringsink.c: run `make setup`"
    src = tmp_path_factory.mktemp("opener") / "opener.c"
    src.write_text(OPENER)
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(src.with_suffix("")), str(src)], check=True)
    return src.with_suffix("")


def _capture(opener: Path, scratch: Path, n: int, every: int, pages: int, read_while_running: bool,
             pause_bytes: int = ringsink.PAUSE_BYTES):
    """Run the opener in a fresh run cgroup under its own monitor; records and the run's counters."""
    cgroup = RunCgroup.create("ringsink-test")
    monitor = Monitor(MonitorConfig(ringbuf_pages=pages), lambda _r: None)
    observer = ringsink.BatchObserver(monitor, pause_bytes)
    batches: list[tuple[bytes, int]] = []
    try:
        observer.open_run(RUN_KEY, lambda items, count: batches.append((items, count)))
        monitor.add_run(RUN_KEY, cgroup.id, None)
        procs = cgroup.path / "cgroup.procs"
        child = subprocess.Popen([str(opener), str(procs), str(scratch), str(n), str(every)])
        while child.poll() is None:
            if read_while_running:
                observer.wait(20)
                observer.drain()
            else:
                time.sleep(0.02)
        assert child.returncode == 0
        observer.drain()
        counters = monitor.counters(RUN_KEY)
        pauses = observer.pauses
    finally:
        monitor.close()
        observer.close()
        cgroup.remove()
    records = [r for items, count in batches
               for f in batch_frames(batch_head(count, len(items)) + items) for r in f.records]
    return records, counters, pauses


def _opens(records: list[bytes]) -> list[bytes]:
    return [r for r in records if HEADER.unpack_from(r)[3] == HOOK_OPEN]


@pytest.mark.parametrize("pause_bytes", [ringsink.PAUSE_BYTES, 4096])
def test_every_record_arrives_and_none_is_dropped_at_a_moderate_rate(opener: Path, tmp_path: Path,
                                                                     pause_bytes: int) -> None:
    """Also with drains that pause every 4 KiB: libbpf keeps the record a pausing callback was
    given (it has already moved past it), and the next drain resumes after it."""
    n = 20_000
    records, counters, pauses = _capture(opener, tmp_path, n, every=500, pages=1024, read_while_running=True,
                                         pause_bytes=pause_bytes)
    if pause_bytes == 4096:
        assert pauses > 0  # 20k records (about 2.5 MB) never fit in 4 KiB
    marked = [r for r in _opens(records) if b"ringsink-miss-" in r]
    assert len(marked) == n
    assert sum(counters.drops.values()) == 0
    assert len(records) == sum(counters.emitted.values())  # everything the kernel wrote for the run


def test_under_forced_overflow_the_counters_account_for_every_missing_record(opener: Path,
                                                                             tmp_path: Path) -> None:
    """A one-page ring that nobody reads while 3,000 opens happen: most are dropped, and
    emitted + dropped is exactly the number of opens, emitted exactly what the consumer got."""
    n = 3_000
    records, counters, _ = _capture(opener, tmp_path, n, every=0, pages=1, read_while_running=False)
    opens = _opens(records)
    assert counters.drops["open"] > 0
    assert len(opens) == counters.emitted["open"]
    assert counters.emitted["open"] + counters.drops["open"] == n
    assert len(records) == sum(counters.emitted.values())
