"""The spool reader reads in blocks: whatever the block size, the same frames and records, and a
torn or oversize frame refused as strictly (spool/format.py `FrameReader`, `SpoolRecords`), and the
C walk over whole batch frames (spool/framescan.c) takes what its Python twin takes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool import accel
from spool import format as spool_format
from spool.format import (
    FRAME_HEAD,
    MAX_FRAME,
    Batch,
    Phase,
    SpoolError,
    SpoolRecords,
    encode_frame,
    iter_frames,
    read_spool,
)

DATA = Path(__file__).resolve().parent / "data"
SPOOLS = sorted(DATA.glob("*.spool"))
EXAMPLE = (DATA / "example.spool").read_bytes()


def _ends(data: bytes) -> list[int]:
    """The offset after each whole frame of `data`, walking the length prefixes."""
    ends, pos = [], 0
    while pos + FRAME_HEAD <= len(data):
        pos += FRAME_HEAD + int.from_bytes(data[pos:pos + FRAME_HEAD], "little")
        if pos <= len(data):
            ends.append(pos)
    return ends


@pytest.mark.parametrize("path", SPOOLS, ids=lambda p: p.name)
@pytest.mark.parametrize("block", [1, 3, 64, 4096])
def test_any_block_size_reads_the_same_spool(monkeypatch: pytest.MonkeyPatch, path: Path, block: int) -> None:
    with path.open("rb") as f:
        frames = list(iter_frames(f))
    whole = read_spool(path)
    monkeypatch.setattr(spool_format, "READ_BYTES", block)
    monkeypatch.setattr(spool_format, "RECORDS_PER_LIST", block)  # batches joined up to this many records
    with path.open("rb") as f:
        assert list(iter_frames(f)) == frames
    assert list(iter_frames(io.BytesIO(path.read_bytes()))) == frames  # not a file: no size asked
    again = read_spool(path)
    assert (again.header, again.phases, again.trailer, again.sdk, again.dac) == \
        (whole.header, whole.phases, whole.trailer, whole.sdk, whole.dac)
    assert list(again.records) == list(whole.records)
    lists = list(again.records.batches())  # type: ignore[attr-defined]
    assert all(lists) and all(len(batch) >= block for batch in lists[:-1])


@given(st.integers(0, len(EXAMPLE)), st.sampled_from([1, 5, 100, 1 << 20]), st.booleans())
def test_a_cut_spool_gives_its_whole_frames_then_a_torn_frame(tmp_path_factory: pytest.TempPathFactory,
                                                              cut: int, block: int, as_file: bool) -> None:
    data = EXAMPLE[:cut]
    whole = [e for e in _ends(EXAMPLE) if e <= cut]
    expected = list(iter_frames(io.BytesIO(EXAMPLE)))[:len(whole)]
    got = []
    if as_file:
        path = tmp_path_factory.mktemp("cut") / "s.spool"
        path.write_bytes(data)
    with pytest.MonkeyPatch.context() as mp, (path.open("rb") if as_file else io.BytesIO(data)) as stream:
        mp.setattr(spool_format, "READ_BYTES", block)
        if cut in (0, *whole):
            got = list(iter_frames(stream))
        else:
            with pytest.raises(SpoolError, match="torn frame"):
                for frame in iter_frames(stream):
                    got.append(frame)
    assert got == expected


def test_a_length_prefix_past_the_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    spool = tmp_path / "s.spool"
    spool.write_bytes(EXAMPLE[:_ends(EXAMPLE)[0]] + (1000).to_bytes(4, "little") + b"x" * 10)
    with spool.open("rb") as f, pytest.raises(SpoolError, match="1000 bytes announced, 10 left"):
        list(iter_frames(f))


def test_an_oversize_frame_is_refused() -> None:
    data = (MAX_FRAME + 1).to_bytes(4, "little") + b"x"
    with pytest.raises(SpoolError, match="too large"):
        list(iter_frames(io.BytesIO(data)))


def test_a_frame_shorter_than_a_batch_head_is_never_skipped_as_a_batch(tmp_path: Path) -> None:
    """read_spool skips batch frames by their first bytes without decoding them; a frame holding
    only the start of those bytes is not a batch whatever the next frame's bytes are (here its
    length prefix completes them): it is decoded and refused, as the reader always did."""
    head = spool_format._BATCH_HEAD
    first = _ends(EXAMPLE)[0]
    n = next(n for n in range(300) if len(encode_frame(Phase(name="p" * n, ts=0))) - FRAME_HEAD == head[-1])
    spool = tmp_path / "s.spool"
    spool.write_bytes(EXAMPLE[:first] + (len(head) - 1).to_bytes(4, "little") + head[:-1]
                      + encode_frame(Phase(name="p" * n, ts=0)) + EXAMPLE[first:])
    with pytest.raises(SpoolError, match="undecodable frame"):
        read_spool(spool)


needs_native = pytest.mark.skipif(accel.native is None,
                                  reason="spool/_framescan is not built (make setup)")
HEAD = spool_format._BATCH_HEAD
RECORDS = st.lists(st.binary(max_size=300), max_size=20)


@st.composite
def lookalike(draw: st.DrawFn) -> bytes:
    """A batch head then an array of `bin` items, with at most one flaw: an item of another type
    (str, ext, int), an item length or the array's count off by one, a byte after the array."""
    records = draw(st.lists(st.binary(max_size=5), min_size=1, max_size=4))
    flaw = draw(st.sampled_from(["none", "type", "length", "count", "after"]))
    bad = draw(st.integers(0, len(records) - 1))
    items = []
    for k, data in enumerate(records):
        kind, n = b"\xc4", len(data)
        if k == bad and flaw == "type":
            kind = draw(st.sampled_from([b"\xd9", b"\xc7", b"\xa3", b"\x01", b"\xc5", b"\xc6"]))
        if k == bad and flaw == "length":
            n = max(n + draw(st.sampled_from([-1, 1])), 0)
        items.append(kind + n.to_bytes({b"\xc5": 2, b"\xc6": 4}.get(kind, 1), "big") + data)
    count = len(items) + (draw(st.sampled_from([-1, 1])) if flaw == "count" else 0)
    array = draw(st.sampled_from([bytes([0x90 | count % 16]), b"\xdc" + count.to_bytes(2, "big"),
                                  b"\xdd" + count.to_bytes(4, "big")]))
    return HEAD + array + b"".join(items) + (b"\x00" if flaw == "after" else b"")


@st.composite
def frame_bytes(draw: st.DrawFn) -> bytes:
    """One frame as a spool may hold it: a batch (as msgspec or the C consumer writes it, or with
    wider array and bin headers than needed), another frame, a batch head before other bytes, or a
    length prefix over MAX_FRAME."""
    kind = draw(st.sampled_from(["batch", "wide", "phase", "lookalike", "foreign", "huge"]))
    if kind == "batch":
        return encode_frame(Batch(records=draw(RECORDS)))
    if kind == "wide":  # array32 and bin32 headers: msgpack allows them for any size
        records = draw(RECORDS)
        body = HEAD + b"\xdd" + len(records).to_bytes(4, "big") \
            + b"".join(b"\xc6" + len(r).to_bytes(4, "big") + r for r in records)
        return len(body).to_bytes(4, "little") + body
    if kind == "phase":
        return encode_frame(Phase(name=draw(st.text(max_size=5)), ts=draw(st.integers(0, 9))))
    if kind == "huge":
        return (MAX_FRAME + draw(st.integers(1, 9))).to_bytes(4, "little") + HEAD
    body = draw(lookalike()) if kind == "lookalike" else HEAD + draw(st.binary(max_size=30))
    return len(body).to_bytes(4, "little") + body


BLOCKS = st.lists(frame_bytes(), max_size=8).map(b"".join)


@needs_native
@settings(max_examples=500)
@given(BLOCKS, st.data())
def test_the_c_batch_walk_takes_what_python_takes(block: bytes, data: st.DataObject) -> None:
    """Any block, cut anywhere by `end` (the buffer goes on past it, as the reader's does), from
    any frame, with any list limit: the C takes the same frames and gives the same records as
    its Python twin; skipping frames by their head too."""
    assert accel.native is not None
    end = data.draw(st.just(len(block)) | st.integers(0, len(block)))
    buffer = bytearray(block[:end] + data.draw(st.sampled_from([b"", block[end:], b"\xff" * 40])))
    pos = data.draw(st.sampled_from([0, *_ends(block[:end])]))  # any frame first
    limit = data.draw(st.just(1 << 20) | st.integers(0, 60))
    ours: list[bytes] = [b"kept"]
    theirs: list[bytes] = [b"kept"]
    assert accel.native.batch_records(buffer, pos, end, ours, limit, HEAD) == \
        spool_format.batch_records(buffer, pos, end, theirs, limit, HEAD)
    assert ours == theirs
    assert accel.native.skip_frames(buffer, pos, end, HEAD) == \
        spool_format.skip_frames(buffer, pos, end, HEAD)


@needs_native
def test_the_c_batch_walk_refuses_offsets_outside_the_block() -> None:
    assert accel.native is not None
    for pos, end in ((-1, 4), (5, 4), (0, 9)):
        with pytest.raises(ValueError, match="offsets within the block"):
            accel.native.batch_records(bytearray(8), pos, end, [], 1, HEAD)
        with pytest.raises(ValueError, match="offsets within the block"):
            accel.native.skip_frames(bytearray(8), pos, end, HEAD)


@needs_native
@settings(max_examples=300)
@given(lookalike(), st.lists(st.binary(max_size=3), min_size=8, max_size=15))
def test_the_c_batch_walk_takes_each_flawed_frame_as_python(body: bytes, records: list[bytes]) -> None:
    """A batch frame with each kind of flaw alone, then one of 8 to 15 records (the widest fixarray)."""
    assert accel.native is not None
    for block in (len(body).to_bytes(4, "little") + body, encode_frame(Batch(records=records))):
        ours: list[bytes] = []
        theirs: list[bytes] = []
        assert accel.native.batch_records(block, 0, len(block), ours, 1 << 20, HEAD) == \
            spool_format.batch_records(block, 0, len(block), theirs, 1 << 20, HEAD)
        assert ours == theirs


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
@given(st.lists(frame_bytes(), max_size=12), st.sampled_from([1, 7, 64, 1 << 20]), st.integers(1, 50))
def test_batches_give_each_batch_frame_records_in_order(tmp_path_factory: pytest.TempPathFactory,
                                                        native: bool, frames: list[bytes], block: int,
                                                        per_list: int) -> None:
    """SpoolRecords.batches over any frames at any block size: every batch's records in order, in
    lists of at least `RECORDS_PER_LIST` but the last, or the error the general way raises."""
    if native and accel.native is None:
        pytest.skip("spool/_framescan is not built (make setup)")
    path = tmp_path_factory.mktemp("batches") / "s.spool"
    path.write_bytes(b"".join(frames))
    try:
        expected: list[bytes] | str = [r for f in iter_frames(io.BytesIO(path.read_bytes()))
                                       if isinstance(f, Batch) for r in f.records]
    except SpoolError as exc:
        expected = str(exc)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spool_format, "READ_BYTES", block)
        mp.setattr(spool_format, "RECORDS_PER_LIST", per_list)
        if not native:
            mp.setattr(accel, "native", None)
        try:
            lists = list(SpoolRecords(path).batches())
        except SpoolError as exc:
            assert str(exc) == expected
            return
    assert [r for batch in lists for r in batch] == expected
    assert all(lists) and all(len(batch) >= per_list for batch in lists[:-1])


@needs_native
@pytest.mark.parametrize("path", SPOOLS, ids=lambda p: p.name)
def test_the_c_walk_reads_every_batch_frame_of_a_recorded_spool(path: Path) -> None:
    """The same records either way (above) would hold for a C walk that declined every frame (the
    general reader takes them then): its own count shows it read each batch frame, as counted by
    the general decoder."""
    assert accel.native is not None
    before = accel.native.counters()[0]
    records = list(read_spool(path).records)
    walked = accel.native.counters()[0] - before
    with path.open("rb") as f:
        batches = [frame for frame in iter_frames(f) if isinstance(frame, Batch)]
    assert records and walked == len(batches) > 0
