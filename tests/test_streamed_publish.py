"""Publishing after stage B is nearly free: the kernel layer is swept, hashed and deflated as it is
written (normalizer/layer_digest.py), and the archive splices its deflate segment in
(normalizer/deflate.py, runner/evidence/archive.py). These tests hold that to the old answers: the
C needle scan gives its Python twin's answer, the block prefilter never clears a line a rule
matches, the segments make the tar tarfile writes in one gzip member, and a secret in a late block
still makes publishing fail closed.
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import hashlib
import io
import itertools
import sys
import tarfile
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from normalizer import accel, layer_digest, redact
from normalizer.build import normalize
from normalizer.deflate import Segment, crc32_combine, inflated
from normalizer.kernel_lines import KernelLayer
from runner.errors import EXIT_RUNNER_ERROR, RunnerError
from runner.evidence.archive import MANIFEST, archive_bytes, build_manifest
from runner.evidence.publish import publish
from spool.format import read_spool

DATA = Path(__file__).resolve().parent / "data"
SPOOLS = sorted(DATA.glob("*.spool"))
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5" * 4

needs_native = pytest.mark.skipif(accel.native is None,
                                  reason="normalizer/_fastscan is not built (make setup)")

PIECES = [b"AKIA", b"akia", b"GhP_", b"sk-", b"XOX", b"aiza", b"K_LIVE_", b"-----BEGIN ", b"eyJ", b"=",
          b"Bearer", b"KEY", b"kEy", b"Secret", b"TOKEN", b"PASSW", b"<redacted:", b"<REDACTED:",
          "\u212a".encode(), "\u017f".encode(), "\u0130".encode(), b"/tmp/x", b"\n", b" ", b"\xff"]
BLOCKS = st.lists(st.sampled_from(PIECES) | st.binary(max_size=6), max_size=40).map(b"".join)
NEEDLES = st.lists(st.sampled_from([p.lower() for p in PIECES]) | st.binary(max_size=3),
                   max_size=8).map(tuple)


@needs_native
@given(BLOCKS, NEEDLES)
def test_the_c_needle_scan_answers_as_python(block: bytes, needles: tuple[bytes, ...]) -> None:
    """Any bytes, any needles (empty, one byte, upper-case ones that can never match)."""
    assert accel.native is not None
    assert accel.native.any_folded(block, needles) == redact.any_folded(block, needles)


@needs_native
def test_the_c_needle_scan_takes_any_buffer_and_refuses_bad_needles() -> None:
    assert accel.native is not None
    needles = redact.sweep_needles()
    assert needles is not None
    assert accel.native.any_folded(bytearray(b"x API_KEY=1"), needles)
    assert not accel.native.any_folded(memoryview(b"/usr/lib/x.so"), needles)
    with pytest.raises(TypeError):
        accel.native.any_folded(b"x", ("key",))
    with pytest.raises(ValueError):
        accel.native.any_folded(b"x", (b"k",) * 65)


LINE_PIECES = ["AKIA", "ABCDEFGHIJKLMNOP", "ghp_", "sk-", "xox", "AIza", "k_live_", "-----BEGIN ", "eyJ",
               "=", "Bearer ", "KEY", "Secret", "TOKEN", "passw", "\u212a", "\u017f", "\u0130", "é",
               "<redacted:jwt:0123abcd>", "/tmp/x", " ", "A1b2C3d4E5f6G7h8"]
LINES = st.lists(st.lists(st.sampled_from(LINE_PIECES), max_size=8).map("".join)
                 | st.text(max_size=30).map(lambda t: t.replace("\n", " ")), max_size=20)


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
@given(lines=LINES)
def test_the_block_prefilter_never_clears_a_line_a_rule_matches(native: bool, lines: list[str]) -> None:
    """The block answer is the per-line one: the first line's first rule, or None."""
    block = "".join(f"{line}\n" for line in lines).encode("utf-8", "surrogatepass")
    expected = next((r for r in map(redact.find_unredacted, (line.encode("utf-8", "surrogatepass")
                                                              .decode("utf-8", "replace") for line in lines))
                     if r), None)
    with pytest.MonkeyPatch.context() as mp:
        if not native:
            mp.setattr(accel, "native", None)
        assert redact.unredacted_in_block(block) == expected


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc32_combine_is_zlibs(a: bytes, b: bytes) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_crc32_combine_over_long_lengths() -> None:
    for n in (1, 511, 1 << 16, (1 << 20) + 7, 3 << 20):
        zeros = bytes(n)
        assert crc32_combine(zlib.crc32(b"head"), zlib.crc32(zeros), n) == zlib.crc32(b"head" + zeros)


@given(st.binary(max_size=3000), st.lists(st.integers(0, 3000), max_size=6))
def test_a_segment_does_not_depend_on_how_its_input_is_cut(data: bytes, cuts: list[int]) -> None:
    """Raw deflate at the archive's level, ended by a full flush, with the data's CRC-32."""
    whole, pieces = io.BytesIO(), io.BytesIO()
    one, cut = Segment(whole), Segment(pieces)
    one.write(data)
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    for start, end in itertools.pairwise(bounds):
        cut.write(data[start:end])
    assert (one.finish(), whole.getvalue()) == (cut.finish(), pieces.getvalue())
    z = zlib.compressobj(3, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert whole.getvalue() == z.compress(data) + z.flush(zlib.Z_FULL_FLUSH)
    assert zlib.decompressobj(-zlib.MAX_WBITS).decompress(whole.getvalue()) == data


def _tarfile_archive(run_id: str, members: dict[str, bytes]) -> bytes:
    """The tar tarfile writes for these members, as the archive writer did before segments."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, data in [(MANIFEST, build_manifest(run_id, members)), *sorted(members.items())]:
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime, info.uid, info.gid = len(data), 0o644, 0, 0, 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


@pytest.mark.parametrize("spool", SPOOLS, ids=lambda p: p.stem)
def test_the_archive_is_tarfiles_tar_in_one_gzip_member(spool: Path) -> None:
    """Whether the kernel layer is a KernelLayer (deflated as written) or bytes, the same bytes;
    one gzip member, CRC and size checked by Python's gzip, members as tarfile reads them."""
    run = normalize(read_spool(spool))
    members = run.members()
    as_bytes = {name: m if isinstance(m, bytes) else m.read_bytes() for name, m in members.items()}
    data = archive_bytes(run.run_id, members)
    assert data == archive_bytes(run.run_id, as_bytes)
    header = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=header, mtime=0, compresslevel=3):
        pass
    assert data[:10] == header.getvalue()[:10]  # the header the writer wrote before segments
    gz = zlib.decompressobj(16 + zlib.MAX_WBITS)
    tar = gz.decompress(data)
    assert gz.eof and gz.unused_data == b""
    assert tar == gzip.decompress(data) == _tarfile_archive(run.run_id, as_bytes)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
        # every member is a regular file, which extractfile never answers with None
        assert {m.name: t.extractfile(m).read() for m in t.getmembers()} == {  # type: ignore[union-attr]
            MANIFEST: build_manifest(run.run_id, as_bytes), **as_bytes}


def _clean_lines(n: int) -> list[bytes]:
    return [b'{"seq":%d,"kind":"openat","value":"/tmp/w/f%d"}\n' % (k, k) for k in range(n)]


def test_a_secret_in_a_late_block_makes_publishing_fail_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel line past the redactor, thousands of lines after the start: the worker's sweep
    catches it, publish refuses (exit 125) and writes nothing."""
    monkeypatch.setattr(layer_digest, "CHUNK_BYTES", 1 << 12)  # many chunks: the worker runs
    before = sys.getswitchinterval()
    layer = KernelLayer()
    lines = _clean_lines(20000)
    for at in range(0, len(lines), 500):
        layer.write_block(b"".join(lines[at:at + 500]), 500)
    layer.write_block(b'{"kind":"openat","value":"/tmp/w/%s"}\n' % GITHUB_TOKEN.encode(), 1)
    layer.write_block(b"".join(lines[:100]), 100)
    run = dataclasses.replace(normalize(read_spool(DATA / "example.spool")), kernel=layer)
    with pytest.raises(RunnerError) as err:
        publish(run, tmp_path / "late.tar.gz")
    assert err.value.exit_code == EXIT_RUNNER_ERROR
    assert str(err.value).startswith("refusing to publish late.tar.gz: layers/kernel.ndjson still holds "
                                     "an unredacted github-token-shaped value")
    assert list(tmp_path.iterdir()) == []
    assert sys.getswitchinterval() == before


def test_a_layer_of_many_chunks_gives_its_bytes_digest_and_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_digest, "CHUNK_BYTES", 1 << 12)
    lines = _clean_lines(5000)
    layer = KernelLayer()
    for at in range(0, len(lines), 37):
        layer.write_block(b"".join(lines[at:at + 37]), len(lines[at:at + 37]))
    data = b"".join(lines)
    assert (layer.read_bytes(), layer.size, layer.count, layer.unredacted) == (data, len(data), 5000, None)
    assert layer.sha256 == hashlib.sha256(data).hexdigest()
    assert inflated(layer.deflated()).read() == data
    with pytest.raises(RuntimeError, match="sealed"):
        layer.write_block(lines[0], 1)


def _digest_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "assay-kernel-digest"]


def test_a_worker_error_reaches_the_writer_and_the_worker_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_digest, "CHUNK_BYTES", 1 << 10)
    taken = []

    def take(self: layer_digest.Digest, chunk: list[bytes]) -> None:
        taken.append(len(chunk))
        if len(taken) == 3:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(layer_digest.Digest, "take", take)
    before = sys.getswitchinterval()
    layer = KernelLayer()
    with pytest.raises(OSError, match="No space left"):
        for line in _clean_lines(2000):
            layer.write_block(line * 40, 40)
        layer.sha256  # noqa: B018 - the seal raises it if no write did
    assert len(taken) == 3  # nothing taken after the error
    del layer
    _assert_workers_gone(before)


def _assert_workers_gone(switch_interval: float) -> None:
    """Once the layer is collected, its worker ends and the switch interval is given back."""
    gc.collect()
    for thread in _digest_threads():
        thread.join(10)
    assert _digest_threads() == []
    assert sys.getswitchinterval() == switch_interval


def test_an_abandoned_layer_ends_its_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage B failing half-way leaves no thread behind and the switch interval as it was."""
    monkeypatch.setattr(layer_digest, "CHUNK_BYTES", 1 << 10)
    before = sys.getswitchinterval()
    layer = KernelLayer()
    for line in _clean_lines(200):
        layer.write_block(line * 40, 40)
    assert len(_digest_threads()) == 1
    assert sys.getswitchinterval() == min(before, layer_digest.SWITCH_INTERVAL)
    del layer
    _assert_workers_gone(before)


def test_a_small_layer_starts_no_thread() -> None:
    layer = KernelLayer()
    layer.write_block(b"".join(_clean_lines(10)), 10)
    assert _digest_threads() == []
    assert layer.unredacted is None
    assert _digest_threads() == []


def test_an_ended_layer_finishes_on_its_own_and_takes_no_more_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage B's last step: the worker ends without anyone waiting for it; the results stay."""
    monkeypatch.setattr(layer_digest, "CHUNK_BYTES", 1 << 10)
    before = sys.getswitchinterval()
    lines = _clean_lines(3000)
    layer = KernelLayer()
    for line in lines:
        layer.write_line(line)
    layer.end()
    for thread in _digest_threads():
        thread.join(10)
    assert _digest_threads() == []
    assert sys.getswitchinterval() == before
    with pytest.raises(RuntimeError, match="sealed"):
        layer.write_line(lines[0])
    assert layer.read_bytes() == b"".join(lines)
    assert (layer.count, layer.unredacted) == (3000, None)


def test_a_layer_collected_on_its_own_workers_thread_never_blocks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector may drop an abandoned layer on any thread, the worker's own included, and its
    queue may be full then: the worker must still end (a blocking put there waited forever)."""
    monkeypatch.setattr(layer_digest, "CHUNK_BYTES", 1)
    before = sys.getswitchinterval()
    queue_full = threading.Event()
    collected: list[object] = []

    class CollectedMidChunk:
        def take(self, chunk: bytes) -> None:
            if not collected:
                queue_full.wait(10)
                ending = pipeline._ending
                assert ending is not None  # the worker is running, so its finalizer is set
                collected.append(ending())  # as gc would, here

    pipeline = layer_digest.Pipeline(CollectedMidChunk())  # type: ignore[arg-type]  # a stand-in digest
    for _ in range(1 + layer_digest.QUEUE_CHUNKS):  # one in the worker's hands, the queue full
        pipeline.put(b"x\n")
    (worker,) = _digest_threads()
    queue_full.set()
    worker.join(10)
    assert not worker.is_alive()
    assert collected == [None]
    assert sys.getswitchinterval() == before
