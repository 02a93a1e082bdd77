"""What publishing needs of the kernel layer, worked out as stage B writes it, beside stage B.

Publishing used to re-read the whole layer after stage B: the fail-closed
secret sweep, then tar+gzip (about 0.3 s for 200k events). Here every
block the writer appends (whole lines, in order) goes through `Digest`:
the sweep (`redact.unredacted_in_block`), the sha256 for the manifest, and
the layer's own deflate segment (normalizer/deflate.py), which is the only
copy kept. The heavy parts (the sweep's scan, sha256, deflate) are C that
releases the GIL, so on a worker thread they run on the second core while
stage B's Python keeps the first.

`Pipeline` gathers blocks into chunks of `CHUNK_BYTES` (each block costs the
worker three GIL hand-overs; a chunk is its blocks as they are, not joined:
copying them into one new buffer, fresh memory each time, cost stage B about
as much as the layer's sha256) and hands them over a queue of `QUEUE_CHUNKS`:
memory stays flat, stage B waits when the worker is behind. A layer smaller
than one chunk never starts a thread. `end` (stage B's last step) hands
over the rest and lets the worker finish on its own while the other members
are made; `close` waits for it. The worker's first error is raised in the
writer on its next hand-over, or at `close`. Results do not depend on the
chunking: the sweep's answer is the per-line one, and sha256 and deflate are
streams.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import sys
import tempfile
import threading
import weakref

from normalizer.deflate import Deflated, Segment
from normalizer.redact import unredacted_in_block

CHUNK_BYTES = 1 << 20
"""Bytes of whole lines the worker takes at once. What is left when stage B ends (the queue, the
chunk in hand, the last one) is done after it: small chunks keep that short."""
QUEUE_CHUNKS = 2
"""Chunks waiting for the worker at most (memory: about (QUEUE_CHUNKS + 2) * CHUNK_BYTES)."""
IN_MEMORY_BYTES = 1 << 20
"""Deflated bytes of the layer kept in memory before they go to an anonymous temp file: about 130k
open-heavy events. A larger bound (8 MiB) makes the live normalizer's peak RSS grow with run
length up to 1.3M events (docs/benchmarks.md); the live normalizer moves the segment to a file to hand it
over anyway, and the archive writer reads it once."""
SWITCH_INTERVAL = 0.0005
"""The interpreter's switch interval while a worker runs (seconds; Python's default is 0.005).
After each C call the worker waits for the GIL until stage B's thread is asked to drop it, one
interval: three calls a chunk at the default made it fall behind stage B
(docs/benchmarks.md). The default is restored when the last worker ends."""


class Digest:
    """sha256, the first rule a line still matches, and a deflate segment of the bytes given in
    order (the only copy kept: 1.6 MB for a 44 MB open-heavy layer, read back inflated)."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.unredacted: str | None = None
        """The first rule a line still matches after redaction (the sweep stops there)."""
        self._deflated = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - lives as long as the layer
            max_size=IN_MEMORY_BYTES, prefix="assay-kernel-")
        # a SpooledTemporaryFile, which typeshed does not count as a BinaryIO (also below)
        self._segment = Segment(self._deflated)  # type: ignore[arg-type]

    def take(self, chunk: list[bytes]) -> None:
        """The next blocks of whole lines, in order."""
        for block in chunk:
            if self.unredacted is None:
                self.unredacted = unredacted_in_block(block)
            self.sha.update(block)
            self._segment.write(block)

    def finish(self) -> Deflated:
        crc = self._segment.finish()
        self._deflated.seek(0)
        return Deflated(self._deflated, crc, self._segment.size)  # type: ignore[arg-type]  # see __init__


_DONE = None


class Pipeline:
    """Blocks to `digest.take` in chunks, on a worker thread once there is more than one chunk."""

    def __init__(self, digest: Digest) -> None:
        self._digest = digest
        self._blocks: list[bytes] = []
        self._gathered = 0
        self._queue: queue.Queue[list[bytes] | None] | None = None
        self._worker: threading.Thread | None = None
        self._error: list[BaseException] = []
        """The worker's first error, until the writer takes it (`_raise`)."""
        self._failed: BaseException | None = None
        self._abandoned = threading.Event()
        self._ending: weakref.finalize[[queue.Queue[list[bytes] | None], threading.Event], Pipeline] | None
        self._ending = None
        self.ended = False

    def put(self, block: bytes) -> None:
        if self.ended:
            raise RuntimeError("the kernel layer was sealed: nothing more can be written")
        self._blocks.append(block)
        self._gathered += len(block)
        if self._gathered >= CHUNK_BYTES:
            self._hand(self._chunk())

    def _chunk(self) -> list[bytes]:
        chunk = self._blocks
        self._blocks = []
        self._gathered = 0
        return chunk

    def _hand(self, chunk: list[bytes]) -> None:
        if self._queue is None:
            self._queue = queue.Queue(QUEUE_CHUNKS)
            self._worker = threading.Thread(target=_work,
                                            args=(self._queue, self._digest, self._error, self._abandoned),
                                            name="assay-kernel-digest", daemon=True)
            _faster_switching(True)
            try:
                self._worker.start()
            except BaseException:
                _faster_switching(False)
                raise
            self._ending = weakref.finalize(self, _abandon, self._queue, self._abandoned)
            self._ending.atexit = False  # at exit the daemon thread just ends: never wait on its queue
        self._queue.put(chunk)
        self._raise()

    def end(self) -> None:
        """No more blocks: hand over what is left; the worker finishes on its own meanwhile."""
        if self.ended:
            return
        self.ended = True
        if self._blocks:
            chunk = self._chunk()
            if self._queue is None:
                self._digest.take(chunk)
            else:
                self._queue.put(chunk)
        if self._queue is not None and self._ending is not None and self._ending.detach() is not None:
            self._queue.put(_DONE)  # the worker stops once the queue is done

    def close(self) -> Digest:
        """`end`, then wait for the worker; the digest (or the worker's error, raised)."""
        self.end()
        if self._worker is not None:
            self._worker.join()
        self._raise()
        return self._digest

    def _raise(self) -> None:
        """Raise the worker's error here, in the writer. Taken out of the worker's list first: its
        traceback will hold the writer's frames, which must not stay reachable from the worker."""
        if self._error:
            self._failed = self._error.pop()
        if self._failed is not None:
            raise self._failed


_switching = threading.Lock()
_running = {"workers": 0, "interval_before": 0.0}


def _faster_switching(on: bool) -> None:
    """Lower the switch interval for one more running worker, or restore it after the last."""
    with _switching:
        if on and _running["workers"] == 0:
            _running["interval_before"] = sys.getswitchinterval()
            sys.setswitchinterval(min(SWITCH_INTERVAL, _running["interval_before"]))
        _running["workers"] += 1 if on else -1
        if not on and _running["workers"] == 0:
            sys.setswitchinterval(_running["interval_before"])


def _abandon(chunks: queue.Queue[list[bytes] | None], abandoned: threading.Event) -> None:
    """A layer dropped before `end` (stage B failed half-way): its worker stops at its next chunk.

    Called by the garbage collector, on whichever thread triggered the collection, the worker's
    own included: so it never blocks (a blocking put on a full queue the worker itself drains
    would wait forever). When the queue is full the worker is not waiting on it, and it sees
    the event after its current chunk; otherwise the put wakes it.
    """
    abandoned.set()
    with contextlib.suppress(queue.Full):
        chunks.put_nowait(_DONE)


def _work(chunks: queue.Queue[list[bytes] | None], digest: Digest, error: list[BaseException],
          abandoned: threading.Event) -> None:
    """The worker: take chunks until told to stop; after an error, only drain the queue."""
    failed = False
    try:
        while (chunk := chunks.get()) is not _DONE and not abandoned.is_set():
            if failed:
                continue
            try:
                digest.take(chunk)
            except BaseException as exc:  # handed to the writer, raised there
                failed = True
                error.append(exc)
    finally:
        _faster_switching(False)
