"""The live normalizer (runner/capture/live.py) against the offline one, on recorded spools.

No root and no BPF: each recorded spool (tests/data/) is written again frame
by frame, by a writer thread that commits whole frames only and leaves the
next frame half-written in the file between commits, while the live pass
follows it. Its members must be byte-identical to `normalize(read_spool())`
of the finished file, and so must everything the summary shows.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from normalizer.build import NormalizedRun, dac_questions, normalize
from runner.capture.live import LiveNormalize
from spool.format import SpoolError, encode_frame, iter_frames, read_spool
from spool.tail import SpoolTail, TailCancelled

DATA = Path(__file__).parent / "data"
SPOOLS = sorted(p.stem for p in DATA.glob("*.spool"))


class SlowWriter:
    """A spool writer as `LiveNormalize` sees one (`size`, `reader_fd`), writing frames in pieces.

    Each frame's first half reaches the file before it is committed, so a
    reader that read past `size` would see a torn frame.
    """

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        self.size = 0

    def reader_fd(self) -> int:
        return os.open(f"/proc/self/fd/{self._fd}", os.O_RDONLY)

    def write(self, data: bytes) -> None:
        half = len(data) // 2
        os.write(self._fd, data[:half])
        time.sleep(0.001)
        os.write(self._fd, data[half:])
        self.size += len(data)

    def close(self) -> None:
        os.close(self._fd)


def _frames(name: str) -> list[bytes]:
    with open(DATA / f"{name}.spool", "rb") as f:
        return [encode_frame(frame) for frame in iter_frames(f)]


def _members(run: NormalizedRun) -> dict[str, bytes]:
    return {k: v if isinstance(v, bytes) else v.read_bytes() for k, v in run.members().items()}


def _replay(name: str, path: Path, frames: list[bytes] | None = None) -> tuple[LiveNormalize, SlowWriter]:
    """Write the recorded spool again at `path` while a live pass follows it (header first, as the runner)."""
    frames = _frames(name) if frames is None else frames
    writer = SlowWriter(path)
    writer.write(frames[0])
    live = LiveNormalize(writer, "live-run")  # type: ignore[arg-type]  # the two members it uses
    feeder = threading.Thread(target=lambda: [writer.write(f) for f in frames[1:]])
    feeder.start()
    feeder.join()
    return live, writer


@pytest.mark.parametrize("name", SPOOLS)
def test_live_members_are_byte_identical_to_offline_normalize(tmp_path: Path, name: str) -> None:
    path = tmp_path / "replayed.spool"
    live, writer = _replay(name, path)
    try:
        got = live.result()
        assert got is not None
        spool = read_spool(path)
        spool.dac = {}  # verdicts come after the trailer: with them the session normalizes offline (below)
        offline = normalize(spool, "live-run")
        assert _members(got) == _members(offline)
        assert (got.written, got.blocked) == (offline.written, offline.blocked)
        assert got.kernel.count == offline.kernel.count > 0
        assert live.dac_questions() == dac_questions(spool)
    finally:
        live.close()
        writer.close()


def test_a_run_with_permission_questions_is_flagged_for_the_offline_pass(tmp_path: Path) -> None:
    """The DAC spool's verdicts change stage A, and the live pass cannot have them: it says so."""
    live, writer = _replay("dac", tmp_path / "dac.spool")
    try:
        assert live.result() is not None
        spool = read_spool(tmp_path / "dac.spool")
        assert spool.dac and dac_questions(spool) == []  # with its verdicts, nothing is left to ask
        spool.dac = {}  # as the spool was when the runner asked
        assert live.dac_questions() and live.dac_questions() == dac_questions(spool)
    finally:
        live.close()
        writer.close()


def test_a_capture_that_never_finishes_the_spool_is_cancelled_not_hung(tmp_path: Path) -> None:
    frames = _frames("example")[:-1]  # no trailer: the capture failed
    live, writer = _replay("example", tmp_path / "torn.spool", frames)
    closer = threading.Timer(0.2, live.close)
    closer.start()
    try:
        assert live.result() is None  # cancelled: the session would fall back (and here, fail as before)
    finally:
        closer.join()
        writer.close()


def test_the_tail_never_reads_past_the_committed_size(tmp_path: Path) -> None:
    """Bytes written but not committed (a frame in progress) are never decoded."""
    frames = _frames("example")
    path = tmp_path / "s.spool"
    garbage = b"\x04\x00\x00\x00\xc1\xc1\xc1\xc1"  # a whole frame that does not decode, not committed
    path.write_bytes(b"".join(frames[:2]) + garbage)
    fd = os.open(path, os.O_RDONLY)
    committed = len(frames[0]) + len(frames[1])
    tail = SpoolTail(fd, lambda: committed)
    try:
        tail.read_header()
        seen: list[bytes] = []
        reader = threading.Thread(target=lambda: _drain(tail, seen))
        reader.start()
        time.sleep(0.1)
        tail.cancel()
        reader.join()
        assert seen == ["cancelled"]
    finally:
        os.close(fd)


def _drain(tail: SpoolTail, seen: list) -> None:
    try:
        for _ in tail.records():
            pass
    except TailCancelled:
        seen.append("cancelled")


def test_a_foreign_file_is_refused_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "foreign"
    path.write_bytes(b"\x05\x00\x00\x00hello")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(SpoolError):
            SpoolTail(fd, lambda: 9).read_header()
    finally:
        os.close(fd)
