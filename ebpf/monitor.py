"""Compile, attach and drain the kernel monitor (the only BCC user).

The program submits records without waking the reader, except every
`WAKE_EVERY` records per CPU (about a quarter of the buffer); the caller also
drains it on a short timer with `drain()`. Measured on 200k opens this cut the workload's slowdown from
about 1.9x (a wakeup per record) to about 1.3x (docs/architecture.md).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ebpf.wire import HOOK_MAX, HOOK_NAMES

SOURCE_DIR = Path(__file__).resolve().parent
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
DEFAULT_RINGBUF_PAGES = 1024  # 4 MiB: zero drops on our open-heavy benchmark
TYPICAL_RECORD_BYTES = 128  # header, a short path and the ring's own record header


@dataclass(frozen=True)
class MonitorConfig:
    """What the compiled program is specialised for."""

    cgroup_id: int
    cgroup_level: int
    ringbuf_pages: int = DEFAULT_RINGBUF_PAGES

    @property
    def wake_every(self) -> int:
        """Records per CPU between forced wakeups: about a quarter of the buffer."""
        return max(self.ringbuf_pages * PAGE_SIZE // 4 // TYPICAL_RECORD_BYTES, 1)


class MonitorError(RuntimeError):
    """The program could not be compiled or attached."""


class Monitor:
    """A loaded monitor: records go to `sink` as raw bytes, in ring order."""

    def __init__(self, config: MonitorConfig, sink: Callable[[bytes], None]) -> None:
        pages = config.ringbuf_pages
        if pages < 1 or pages & (pages - 1):
            raise MonitorError(f"ring buffer pages must be a power of two, got {pages}")
        try:
            from bcc import BPF  # Debian python3-bpfcc
        except ImportError as exc:  # pragma: no cover - checked by doctor
            raise MonitorError(f"cannot import bcc ({exc}); install python3-bpfcc") from exc
        cflags = [
            f"-I{SOURCE_DIR}",
            f"-DRUN_CGROUP_ID={config.cgroup_id}ULL",
            f"-DRUN_CGROUP_LEVEL={config.cgroup_level}",
            f"-DRINGBUF_PAGES={pages}",
            f"-DWAKE_EVERY={config.wake_every}",
            "-Wno-ignored-attributes",
            "-Wno-macro-redefined",
        ]
        try:
            self._bpf = BPF(src_file=str(SOURCE_DIR / "monitor.c").encode(), cflags=cflags)
        except Exception as exc:
            raise MonitorError(f"cannot load the eBPF monitor: {exc}") from exc
        self._sink = sink
        self._bpf[b"rb"].open_ring_buffer(self._on_record)

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        """Send records to `sink` from now on."""
        self._sink = sink

    def _on_record(self, _ctx: int, data: int, size: int) -> int:
        self._sink(ctypes.string_at(data, size))
        return 0

    def wait(self, timeout_ms: int) -> None:
        """Sleep until the kernel forces a wakeup (buffer filling) or timeout."""
        self._bpf.ring_buffer_poll(timeout_ms)

    def drain(self) -> None:
        """Hand every record currently in the ring buffer to the sink."""
        self._bpf.ring_buffer_consume()

    def _per_hook(self, table: str) -> dict[str, int]:
        values = self._bpf[table.encode()]
        out: dict[str, int] = {}
        for hook, name in HOOK_NAMES.items():
            out[name] = sum(values[ctypes.c_int(hook)])
        return out

    def drops(self) -> dict[str, int]:
        """Failed ring-buffer writes per hook since load."""
        return self._per_hook("drops")

    def emitted(self) -> dict[str, int]:
        """Successful ring-buffer writes per hook since load."""
        return self._per_hook("emitted")

    def header_layout(self) -> list[tuple[str, int, int]]:
        """(field, offset, size) of `struct assay_hdr` as clang laid it out."""
        leaf = self._bpf[b"layout_probe"].Leaf
        return [(name, getattr(leaf, name).offset, getattr(leaf, name).size)
                for name, _ in leaf._fields_]

    def close(self) -> None:
        """Detach and unload everything, without making the caller wait.

        Releasing a tracepoint attachment waits for an RCU grace period:
        about 70 ms each, 1.4 s for our 20 hooks. A detached grandchild holds
        the last references and releases them in the background; the
        caller's own closes then only drop references and return at once.
        Nothing of the run's can match afterwards: its cgroup is gone.
        """
        done_r, done_w = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            try:
                os.setsid()
                if os.fork() == 0:
                    devnull = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1, 2):  # never hold the caller's pipes open
                        os.dup2(devnull, fd)
                    os.close(done_w)
                    os.read(done_r, 1)  # EOF once the caller dropped its references
                    self._bpf.cleanup()
            finally:
                os._exit(0)
        os.close(done_r)
        os.waitpid(child, 0)
        self._bpf.cleanup()
        os.close(done_w)


assert max(HOOK_NAMES) < HOOK_MAX
