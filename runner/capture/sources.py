"""Where a run's records come from: the sensor, through the observer, for one run key.

A `Sensor` opens a run (`open(cgroup, net)`: the run's key in the
monitor's maps, before its first task joins the cgroup) and returns the
run's `RunSource`, the `EventSource` the capture phases drain
(runner/capture/phases.py) plus the run's counters (`ledger`) and `close()`.

- `LocalSensor` (direct mode): loads (compiled once, then from the cache:
  ebpf/bpfobject.py) and attaches the monitor for this one run and reads
  the ring itself through an `Observer` with one sink; its warden
  (runner/capture/warden.py) kills the run the moment the runner dies.
- The daemon's worker gets a `SharedSensor` (runner/daemon/sensor.py): the
  daemon's monitor, loaded once in its sensor process, with the run's
  records arriving over its channel (runner/capture/channel.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from ebpf import ringsink
from ebpf.loader import RingError
from ebpf.monitor import (
    RUN_CGROUP_LEVEL,
    RUN_KEY,
    Monitor,
    MonitorConfig,
    MonitorError,
    NetPolicySpec,
    RunCounters,
    RunLedger,
)
from ebpf.observer import Observer
from ebpf.ringsink import BatchObserver, BatchSink
from runner.capture.cgroup import RunCgroup
from runner.capture.warden import Warden
from runner.errors import RunnerError
from runner.logs import get_logger

log = get_logger("session")
CONSUMER_ENV = "ASSAY_RUNNER_RING_CONSUMER"
"""`python` keeps the per-record Python observer although the C consumer is built (A/B benchmarks)."""


def ring_consumer() -> str:
    """`c` when the compiled ring consumer is built and not turned off (`CONSUMER_ENV`), else `python`."""
    return "c" if ringsink.available() and os.environ.get(CONSUMER_ENV) != "python" else "python"


class RunSource(Protocol):
    """One run's records and counters (an `EventSource` with its counters and an end)."""

    def counters(self) -> RunCounters:
        """The run's own drops, writes and untracked tasks (plus what no run could own meanwhile)."""

    def set_sink(self, sink: Callable[[bytes], None]) -> None: ...

    def wait(self, timeout_ms: int, wake: int | None = None) -> None: ...

    def drain(self) -> None: ...

    def finish(self) -> None: ...

    def drops(self) -> dict[str, int]: ...

    def emitted(self) -> dict[str, int]: ...

    def close(self) -> None: ...


class Sensor(Protocol):
    def open(self, cgroup: RunCgroup, net: NetPolicySpec | None) -> RunSource: ...


class Buffered:
    """Holds records that arrive before the sink is set (the spool is made after the spawn).

    Records come one by one (`sink`) or, from the C consumer, as encoded
    batches (`batch_sink`, ebpf/ringsink.py); a source uses one of the two.
    """

    def __init__(self) -> None:
        self._early: list[bytes] = []
        self._early_batches: list[tuple[bytes, int]] = []
        self.sink: Callable[[bytes], None] = self._early.append
        self.batch_sink: BatchSink = lambda items, count: self._early_batches.append((items, count))

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        for record in self._early:
            sink(record)
        self._early.clear()
        self.sink = sink

    def set_batch_sink(self, sink: BatchSink) -> None:
        """Where batches go from now on (`spool.writer.Spooler.add_batch`)."""
        for items, count in self._early_batches:
            sink(items, count)
        self._early_batches.clear()
        self.batch_sink = sink


@contextlib.contextmanager
def _ring_read() -> Iterator[None]:
    """A ring read that failed (ebpf/loader.py `RingError`) ends the run with one line: records may
    be lost where nothing counted them, so no archive may be written as if the ring were empty."""
    try:
        yield
    except RingError as exc:
        raise RunnerError(f"cannot read the eBPF ring buffer: {exc.strerror}; the evidence would be "
                          "incomplete, so no archive is written") from exc


class LocalSource(Buffered):
    """Direct mode's run: its own monitor, read here by an observer with this one run."""

    def __init__(self, monitor: Monitor, cgroup: RunCgroup, net: NetPolicySpec | None) -> None:
        super().__init__()
        self._monitor = monitor
        self.consumer = ring_consumer()
        """Which ring reader this run has (logged with `monitor.attached`)."""
        self._observer: Observer | BatchObserver
        if self.consumer == "c":
            self._observer = BatchObserver(monitor)
            self._observer.open_run(RUN_KEY, lambda items, count: self.batch_sink(items, count))
        else:
            self._observer = Observer(monitor)
            self._observer.open_run(RUN_KEY, self.sink)
        self.ledger = RunLedger(monitor, RUN_KEY)
        monitor.add_run(RUN_KEY, cgroup.id, net)
        if net is not None:
            monitor.attach_net(RunCgroup.root_path(), link=True)
        self._warden = Warden(cgroup.path, cgroup.record)  # after every attach: it holds them all

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        super().set_sink(sink)
        if isinstance(self._observer, Observer):
            self._observer.close_run(RUN_KEY)  # straight to the new sink, no indirection per record
            self._observer.open_run(RUN_KEY, sink)

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        with _ring_read():
            self._observer.wait(timeout_ms, wake)

    def drain(self) -> None:
        with _ring_read():
            self._observer.drain()

    def finish(self) -> None:
        self.drain()

    def counters(self) -> RunCounters:
        return self.ledger.counters()

    def drops(self) -> dict[str, int]:
        return self.ledger.counters().drops

    def emitted(self) -> dict[str, int]:
        return self.ledger.counters().emitted

    def close(self) -> None:
        """Unload the run's own monitor (its maps, the run's key with them); release the warden."""
        self._warden.release()
        self._monitor.close()
        self._observer.close()  # after the monitor: libbpf no longer holds the C consumer's buffers


class LocalSensor:
    """Loads and attaches the monitor for one run (about 0.06 s from the compiled-object cache,
    1.5-3 s when it must be compiled first; the daemon does it once).

    `preload()` starts that in a thread as soon as the run's inputs are checked: its kernel work
    (the verifier, the tracepoint attaches; clang on a cache miss) releases the GIL, so it
    overlaps the start-up still to come (structlog, the run's cgroup and limits). `open` takes
    the monitor; `discard` unloads one that no run took (the run ended before its source opened).
    """

    def __init__(self, ringbuf_pages: int) -> None:
        self.ringbuf_pages = ringbuf_pages
        self._loading: threading.Thread | None = None
        self._loaded: Monitor | BaseException | None = None

    def preload(self) -> LocalSensor:
        self._loading = threading.Thread(target=self._preload, name="monitor-preload", daemon=True)
        self._loading.start()
        return self

    def _preload(self) -> None:
        try:
            self._loaded = self._load(RUN_CGROUP_LEVEL)
        except BaseException as exc:  # handed to the thread that opens the run
            self._loaded = exc

    def _load(self, run_level: int) -> Monitor:
        try:
            return Monitor(MonitorConfig(self.ringbuf_pages, run_level=run_level), lambda _record: None)
        except MonitorError as exc:
            raise RunnerError(f"{exc}; run 'assay-runner doctor' to see what is missing") from exc

    def _take(self) -> Monitor | BaseException | None:
        if self._loading is not None:
            self._loading.join()
            self._loading = None
        loaded, self._loaded = self._loaded, None
        return loaded

    def open(self, cgroup: RunCgroup, net: NetPolicySpec | None) -> RunSource:
        t0 = time.monotonic()
        loaded = self._take()
        if isinstance(loaded, BaseException):
            raise loaded
        if loaded is not None and loaded.config.run_level != cgroup.level:
            loaded.close()  # preloaded for the usual level: this cgroup is elsewhere
            loaded = None
        monitor = loaded or self._load(cgroup.level)
        try:
            source = LocalSource(monitor, cgroup, net)
        except MonitorError as exc:
            monitor.close()
            raise RunnerError(str(exc)) from exc
        except BaseException:
            monitor.close()
            raise
        log.info("monitor.attached", seconds=round(time.monotonic() - t0, 3), preloaded=loaded is not None,
                 ringbuf_pages=self.ringbuf_pages, cgroup=str(cgroup.path), net_policy=net is not None,
                 ring_consumer=source.consumer, compiled_now=not monitor.from_cache)
        return source

    def discard(self) -> None:
        """Unload a preloaded monitor that no run took (safe after `open`, and twice)."""
        loaded = self._take()
        if isinstance(loaded, Monitor):
            loaded.close()
