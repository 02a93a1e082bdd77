"""The live normalizer (runner/capture/live.py) against the offline one, on recorded spools.

No root and no BPF: each recorded spool (tests/data/) is written again frame
by frame, by a writer thread that commits whole frames only and leaves the
next frame half-written in the file between commits, while the live pass
follows it: in a thread of this process (`LiveNormalize`, the daemon's) and
in a process of its own (`LiveProcess`, direct mode's, which cannot ask the
writer what is committed). Its members must be byte-identical to
`normalize(read_spool())` of the finished file, and so must everything the
summary shows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_surface import missing_opens

from normalizer import surface
from normalizer.build import NormalizedRun, dac_questions, normalize
from runner.capture import live_process
from runner.capture.live import LiveNormalize, LivePass
from runner.capture.live_child import IDLE
from runner.capture.live_process import LiveProcess
from spool.format import FRAME_HEAD, Batch, SpoolError, decode_frame, encode_frame, iter_frames, read_spool
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
        self.records = 0

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


PASSES = {"thread": LiveNormalize, "process": lambda writer, run_id: LiveProcess(writer, run_id, IDLE)}


@pytest.fixture(params=list(PASSES))
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _replay(name: str, path: Path, kind: str,
            frames: list[bytes] | None = None) -> tuple[LivePass, SlowWriter]:
    """Write the recorded spool again at `path` while a live pass follows it (header first, as the runner)."""
    frames = _frames(name) if frames is None else frames
    writer = SlowWriter(path)
    writer.write(frames[0])
    live = PASSES[kind](writer, "live-run")  # type: ignore[operator]  # the members it uses
    feeder = threading.Thread(target=lambda: [writer.write(f) for f in frames[1:]])
    feeder.start()
    feeder.join()
    return live, writer


def test_a_surface_past_the_memory_bound_is_handed_over_whole(tmp_path: Path, kind: str) -> None:
    """More distinct paths than the surface holds in memory (normalizer/surface.py), and a member
    too large to stay in memory: the values spill and merge, the live process hands the member's
    file over, and every byte reaches the runner."""
    frames = _frames("example")
    opens = missing_opens(surface.HELD_VALUES + 5000)
    batches = [encode_frame(Batch(records=opens[i:i + 4096])) for i in range(0, len(opens), 4096)]
    path = tmp_path / "replayed.spool"
    live, writer = _replay("example", path, kind, [*frames[:-1], *batches, frames[-1]])
    try:
        got = live.result()
        assert got is not None
        spool = read_spool(path)
        spool.dac = {}
        offline = normalize(spool, "live-run")
        assert _members(got) == _members(offline)
        assert got.preview == offline.preview and got.preview.files.count > surface.HELD_VALUES
        assert got.surface.size > surface.FILE_IN_MEMORY
    finally:
        live.close()
        writer.close()


@pytest.mark.parametrize("name", SPOOLS)
def test_live_members_are_byte_identical_to_offline_normalize(tmp_path: Path, name: str, kind: str) -> None:
    path = tmp_path / "replayed.spool"
    live, writer = _replay(name, path, kind)
    try:
        got = live.result()
        assert got is not None
        spool = read_spool(path)
        spool.dac = {}  # verdicts come after the trailer: with them the session normalizes offline (below)
        offline = normalize(spool, "live-run")
        assert _members(got) == _members(offline)
        assert got.preview == offline.preview
        assert got.kernel.count == offline.kernel.count > 0
        assert live.dac_questions() == dac_questions(spool)
    finally:
        live.close()
        writer.close()


def test_a_run_with_permission_questions_is_flagged_for_the_offline_pass(tmp_path: Path, kind: str) -> None:
    """The DAC spool's verdicts change stage A, and the live pass cannot have them: it says so."""
    live, writer = _replay("dac", tmp_path / "dac.spool", kind)
    try:
        assert live.result() is not None
        spool = read_spool(tmp_path / "dac.spool")
        assert spool.dac and dac_questions(spool) == []  # with its verdicts, nothing is left to ask
        spool.dac = {}  # as the spool was when the runner asked
        assert live.dac_questions() and live.dac_questions() == dac_questions(spool)
    finally:
        live.close()
        writer.close()


def _records_in(frames: list[bytes]) -> int:
    """How many records the Batch frames among `frames` hold."""
    decoded = [decode_frame(f[FRAME_HEAD:]) for f in frames]
    return sum(len(f.records) for f in decoded if isinstance(f, Batch))


def _until(condition: Callable[[], bool], what: str, within: float = 30.0) -> None:
    """Poll `condition` until it holds; fail naming `what` if it has not within `within` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def test_a_capture_that_never_finishes_the_spool_is_cancelled_not_hung(tmp_path: Path) -> None:
    frames = _frames("example")[:-1]  # no trailer: the capture failed
    live, writer = _replay("example", tmp_path / "torn.spool", "thread", frames)

    def close_once_all_is_read() -> None:  # the pass is then waiting for a trailer that never comes
        _until(lambda: live.records_read == _records_in(frames), "the pass read every record")
        live.close()

    closer = threading.Thread(target=close_once_all_is_read)
    closer.start()
    try:
        assert live.result() is None  # cancelled: the session would fall back (and here, fail as before)
    finally:
        closer.join()
        writer.close()


class Committed:
    """A tail's `committed()`, counting the reader's calls to it.

    The reader asks before each read: after the call that `read_header` makes,
    each further call is the reader coming back for more, having taken every
    whole frame below what it was told before.
    """

    def __init__(self, size: Callable[[], int]) -> None:
        self._size = size
        self._calls = 0
        self._changed = threading.Condition()

    def __call__(self) -> int:
        with self._changed:
            self._calls += 1
            self._changed.notify_all()
        return self._size()

    @property
    def calls(self) -> int:
        with self._changed:
            return self._calls

    def wait_for(self, calls: int, reader: threading.Thread) -> None:
        """Until the reader has called `calls` times, or has ended (what it saw tells why)."""
        deadline = time.monotonic() + 30
        with self._changed:
            while self._calls < calls and reader.is_alive():
                assert time.monotonic() < deadline, f"the reader asked {self._calls} times, never {calls}"
                self._changed.wait(0.01)


def test_the_tail_never_reads_past_the_committed_size(tmp_path: Path) -> None:
    """Bytes written but not committed (a frame in progress) are never decoded."""
    frames = _frames("example")
    path = tmp_path / "s.spool"
    garbage = b"\x04\x00\x00\x00\xc1\xc1\xc1\xc1"  # a whole frame that does not decode, not committed
    path.write_bytes(b"".join(frames[:3]) + garbage)
    fd = os.open(path, os.O_RDONLY)
    committed = Committed(lambda: len(frames[0]) + len(frames[1]) + len(frames[2]))
    tail = SpoolTail(fd, committed)
    try:
        tail.read_header()
        seen: list[str] = []
        reader = threading.Thread(target=lambda: _drain(tail, seen))
        reader.start()
        committed.wait_for(3, reader)  # the reader took every committed frame, came back, and came back again
        tail.cancel()
        reader.join()
        assert seen == ["cancelled"] and tail.records_read == _records_in(frames[1:3]) > 0
    finally:
        os.close(fd)


def _drain(tail: SpoolTail, seen: list[str]) -> None:
    try:
        for _ in tail.records():
            pass
    except TailCancelled:
        seen.append("cancelled")
    except SpoolError as exc:  # what decoding the garbage would raise
        seen.append(repr(exc))


def test_a_foreign_file_is_refused_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "foreign"
    path.write_bytes(b"\x05\x00\x00\x00hello")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(SpoolError):
            SpoolTail(fd, lambda: 9).read_header()
    finally:
        os.close(fd)


def test_the_tail_by_file_size_decodes_only_whole_frames(tmp_path: Path) -> None:
    """Without the writer's count (another process), a frame in progress, or one cut back after a
    failed write, is never decoded: only frames whose every byte is in the file."""
    frames = _frames("example")
    last = len(frames) - 1  # the trailer: decoded, it would end the records instead of waiting
    path = tmp_path / "s.spool"
    whole = b"".join(frames[:last])
    path.write_bytes(whole + frames[last][:len(frames[last]) - 1])  # all but its last byte
    fd = os.open(path, os.O_RDONLY)
    committed = Committed(lambda: os.fstat(fd).st_size)  # the default, counted
    tail = SpoolTail(fd, committed)
    try:
        tail.read_header()
        seen: list[str] = []
        reader = threading.Thread(target=lambda: _drain(tail, seen))
        reader.start()
        committed.wait_for(2, reader)  # every whole frame taken; the reader waits for the rest of the last
        cut = committed.calls
        os.truncate(path, len(whole))  # the writer cuts a failed frame back
        committed.wait_for(cut + 2, reader)  # at least one whole look at the file as it is now
        tail.cancel()
        reader.join()
        assert seen == ["cancelled"] and tail.records_read == _records_in(frames[1:last]) > 0
    finally:
        os.close(fd)


def _gone(pid: int, within: float = 5.0) -> bool:
    """Has process `pid` ended (and been reaped, or become a zombie) within `within` seconds?"""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR for the live process (it inherits the environment): what it leaves there is visible."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_the_live_process_leaves_nothing_behind(tmp_path: Path, private_tmp: Path) -> None:
    before = _open_fds()
    live, writer = _replay("example", tmp_path / "s.spool", "process")
    got = live.result()
    assert got is not None and got.kernel.count > 0
    del got
    live.close()
    writer.close()
    assert _gone(live.pid) and list(private_tmp.iterdir()) == []
    assert _open_fds() <= before


def test_a_killed_live_process_is_a_failed_pass_not_a_hang(tmp_path: Path, private_tmp: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    before = _open_fds()
    frames = _frames("example")
    writer = SlowWriter(tmp_path / "s.spool")
    writer.write(frames[0])
    live = LiveProcess(writer, "live-run", IDLE)  # type: ignore[arg-type]
    os.kill(live.pid, signal.SIGKILL)
    for f in frames[1:]:
        writer.write(f)
    warnings: list[tuple[str, object]] = []
    monkeypatch.setattr(live_process, "log", SimpleNamespace(
        warning=lambda event, **fields: warnings.append((event, fields.get("error")))))
    assert live.dac_questions() is None and live.result() is None
    # the socket's EOF ended the wait, not the deadline (which kills a child that is still there)
    assert warnings == [("normalize.live_failed",
                         "the live normalizer ended without a result (exit status -9)")]
    live.close()
    writer.close()
    assert list(private_tmp.iterdir()) == [] and _open_fds() <= before


def test_a_capture_that_fails_ends_the_live_process(tmp_path: Path, private_tmp: Path) -> None:
    """No trailer will come: `close` (the session's `finally`) ends the child, which was waiting."""
    before = _open_fds()
    frames = _frames("example")[:-1]
    live, writer = _replay("example", tmp_path / "torn.spool", "process", frames)
    _until(lambda: live.records_read == _records_in(frames), "the live process read every record")
    assert not _gone(live.pid, within=0)  # still following the spool, for a trailer that never comes
    live.close()
    writer.close()
    assert _gone(live.pid) and list(private_tmp.iterdir()) == [] and _open_fds() <= before


def test_the_live_process_dies_with_the_runner(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: a runner killed with SIGKILL takes its live process with it."""
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from pathlib import Path
from test_live_normalize import SlowWriter, _frames
from runner.capture.live_child import IDLE
from runner.capture import live_process
from runner.capture.live_process import LiveProcess
writer = SlowWriter(Path({str(tmp_path / "s.spool")!r}))
writer.write(_frames("example")[0])
live = LiveProcess(writer, "live-run", IDLE)
print(live.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _gone(int(proc.stdout))


def test_the_live_process_hands_back_every_field_of_the_normalized_run() -> None:
    """A field added to NormalizedRun must reach the runner from the live process too (the kernel
    layer and the surface come as descriptors)."""
    from dataclasses import fields

    from runner.capture.live_child import Members
    assert set(Members.__struct_fields__) == {f.name for f in fields(NormalizedRun)} - {"kernel", "surface"}
