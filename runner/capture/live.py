"""Normalizing while the command runs, so the archive is ready soon after it exits.

A `LiveNormalize` thread follows the spool as the drain loop writes it
(spool/tail.py) and runs the normalizer's stage A (normalizer/build.py
`scan`: decode, attribute, resolve, classify, file per thread) over the
records as they arrive. Stage B (`finish`: numbering, canonical order, the
kernel layer and the other members) runs once the session asks for the
result, after the cgroup is removed and the monitor detached (those fork:
see `settle`); the session then only validates and writes the archive.

The result is byte-identical to `normalize(read_spool(spool))` by
construction: the same two functions over the same frames in the same
order (tests/test_live_normalize.py checks it on recorded spools). Two cases
go back to normalizing the finished spool offline: a non-root run whose
failed opens need the runner's permission verdicts (they are asked after
the run and change stage A), and any failure of the live pass (the offline
pass then reports the problem as it always did).

The pass runs at a lower priority while the command runs (`NICE_ENV`): on
two cores, the command keeps its own core. Where the ring is drained in
this process (direct mode) the same pass runs in a process of its own
instead (`start`, runner/capture/live_process.py), so that it never holds
the drain loop's GIL, and there at SCHED_IDLE: it takes only CPU time that
nothing else (the command, the drain loop, the machine's other work) wants.
"""

from __future__ import annotations

import contextlib
import os
import threading

from normalizer.build import NormalizedRun, Scanned, finish, scan
from runner.capture.live_child import IDLE, lower, restore
from runner.capture.live_process import LiveProcess, WrittenSpool
from runner.evidence.publish import warm
from runner.logs import get_logger
from spool.tail import SpoolTail
from spool.writer import Spooler

LIVE_ENV = "ASSAY_RUNNER_LIVE_NORMALIZE"
"""`0` turns the live pass off (A/B benchmarks); it is on by default in both modes."""
NICE_ENV = "ASSAY_RUNNER_LIVE_NICE"
"""The pass's priority while the command runs: `idle` (SCHED_IDLE) or N (nice +N; per thread in
Linux); by default +10 for the thread, `idle` for the process (docs/architecture.md)."""
log = get_logger("session")


def enabled() -> bool:
    """Whether to normalize while the command runs: yes unless `ASSAY_RUNNER_LIVE_NORMALIZE=0`."""
    return os.environ.get(LIVE_ENV) != "0"


class LiveNormalize:
    """Stage A over the growing spool, then stage B once the trailer is in, on a thread of its own."""

    def __init__(self, spooler: WrittenSpool, run_id: str) -> None:
        self._run_id = run_id
        self._fd = spooler.reader_fd()
        self._tail = SpoolTail(self._fd, lambda: spooler.size)
        self._scanned: Scanned | None = None
        self._result: NormalizedRun | None = None
        self._error: Exception | None = None
        self._scan_over = threading.Event()
        self._warmed = threading.Event()
        self._go = threading.Event()
        self._stopped = False
        self._nice = os.getpriority(os.PRIO_PROCESS, 0)  # the runner's (this thread's)
        self._tid: int | None = None
        self.peak_rss_mib: float | None = None
        self.cpu_s: float | None = None
        """Always None, as `peak_rss_mib`: the thread's are the runner's (LiveProcess has its own)."""
        self._thread = threading.Thread(target=self._run, name="assay-live-normalize", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._tid = threading.get_native_id()
        with contextlib.suppress(OSError, ValueError):  # a preference: else it runs at the runner's own
            lower(self._tid, os.environ.get(NICE_ENV, "10"), self._nice)
        try:
            try:
                warm()  # publish's validation imports, while the command runs
            finally:
                self._warmed.set()
            self._scanned = scan(self._tail.growing(self._tail.records()))
            self._scan_over.set()
            self._go.wait()
            if self._stopped:  # the session normalizes the finished spool itself
                self._scanned.buckets.close()
                return
            self._result = finish(self._scanned, self._tail.finished(), self._run_id)
        except Exception as exc:  # handed to the session, which falls back to the offline pass
            self._error = exc
        finally:
            self._scan_over.set()

    @property
    def records_read(self) -> int:
        """How far the pass has got (records read from the spool)."""
        return self._tail.records_read

    def settle(self) -> None:
        """Wait until the pass does nothing a forked child could trip on: it imports at its start
        (a module lock held across a fork stays held in the child), then only computes. The
        runner forks after the command exits (the monitor's detach, permission checks as the
        command's user); stage B waits for `result()`, after those."""
        self._warmed.wait()

    def hurry(self) -> None:
        """The command has exited: from now on the pass is what the user waits for, so it runs at
        the runner's own priority (lowering a nice value back needs CAP_SYS_NICE, which the runner has)."""
        if self._tid is not None:
            with contextlib.suppress(OSError):  # the thread has ended, or no capability: nothing to gain
                restore(self._tid, self._nice)

    def result(self) -> NormalizedRun | None:
        """The normalized run once the spool is finished (stage B runs now), or None (logged) when
        the live pass failed."""
        self.hurry()
        self._tail.poke()
        self._go.set()
        self._thread.join()
        if self._error is not None:
            log.warning("normalize.live_failed", error=f"{type(self._error).__name__}: {self._error}",
                        hint="normalizing the finished spool instead")
            return None
        return self._result

    def dac_questions(self) -> list[tuple[str, str]] | None:
        """Once stage A is over: the (access, path) pairs it could not judge without permission
        verdicts (as build.dac_questions), or None when the pass failed before."""
        self.hurry()
        self._tail.poke()  # the trailer is in: no need to wait for the next poll
        self._scan_over.wait()
        if self._scanned is None:
            return None
        return self._scanned.scan.judge.questions()

    def close(self) -> None:
        """Stop the pass (the capture failed, or its result is not wanted); release the spool
        descriptor; once (the session may close a pass it gave up on before its `finally` does)."""
        if self._stopped:
            return
        self._stopped = True
        self._tail.cancel()
        self._go.set()
        self._thread.join()
        os.close(self._fd)


LivePass = LiveNormalize | LiveProcess
"""The session-facing interface: `records_read`, `hurry`, `settle`, `dac_questions`, `result`, `close`."""


def start(spooler: Spooler, run_id: str, ring_in_process: bool) -> LivePass | None:
    """The live pass over `spooler`'s spool, or None when it is off or could not start (logged).

    Where this process drains the ring itself (direct mode), the pass runs in a process of its
    own (runner/capture/live_process.py): a thread here, niced and preempted while it holds the
    GIL, stalls the drain loop for as long as it waits for a CPU, and the ring overflowed on a
    loaded machine (85,532 records dropped in one open_heavy run, docs/benchmarks.md). The
    daemon's workers do not drain a ring (the sensor process does), so they keep the thread,
    which starts at no cost.
    """
    if not enabled():
        return None
    if not ring_in_process:
        return LiveNormalize(spooler, run_id)
    try:
        return LiveProcess(spooler, run_id, os.environ.get(NICE_ENV, IDLE))
    except (OSError, ValueError) as exc:  # no process to spare: the spool is normalized after the exit
        log.warning("normalize.live_unavailable", error=f"{type(exc).__name__}: {exc}",
                    hint="normalizing the finished spool after the command exits")
        return None
