"""The normalizer's fast paths are speed only: the C accelerator, its pure-Python fallback and the
general way alone give the same archive bytes, on every recorded spool and on generated records.

normalizer/scan.py takes closes and remembered opens without a Python object per record, in C
when normalizer/fastscan.c is built (normalizer/accel.py) and in Python otherwise; the prefilters
(telemetry, redaction) must never clear what the full test would catch.
"""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebpf import wire
from normalizer import accel, build, collector, redact, scan, surface, telemetry
from normalizer.buckets import index_shapes
from normalizer.build import normalize
from normalizer.classify import Classified, open_meta
from normalizer.decode import DecodeError
from normalizer.kernel_lines import KernelLines, join_indexed, join_lines, shape_tails
from normalizer.surface import SurfacePreview
from runner.evidence.archive import archive_bytes
from spool.format import Spool, read_spool

DATA = Path(__file__).resolve().parent / "data"
ENCODE = msgspec.json.Encoder().encode
SPOOLS = sorted(DATA.glob("*.spool"))
MODES = ("native", "python", "general")
"""The C fast path (when built), the Python twin, and the general way for every record (with
stage B working out every spilled chunk itself: nothing prepared in stage A)."""

needs_native = pytest.mark.skipif(accel.native is None,
                                  reason="normalizer/_fastscan is not built (make setup)")


def test_make_setup_built_the_accelerator() -> None:
    """CI runs `make setup`, which builds the accelerator: the C path is the one tested here."""
    assert accel.native is not None


@contextlib.contextmanager
def mode(name: str, tiny: bool = False) -> Iterator[None]:
    """Normalize the `name` way; `tiny` memos and spills make every limit and rotation happen."""
    with pytest.MonkeyPatch.context() as mp:
        if name != "native":
            mp.setattr(accel, "native", None)
        if name == "general":
            mp.setattr(scan, "FAST", False)
            mp.setattr(build, "PREPARE", False)
        if tiny:
            mp.setattr(scan, "OPEN_MEMO", 2)
            mp.setattr(build, "SPILL_EVERY", 3)
            mp.setattr(collector, "MEMO_ENTRIES", 2)
            mp.setattr(surface, "HELD_VALUES", 2)
            mp.setattr(surface, "FRAME_VALUES", 2)
            mp.setattr(surface, "FAN_IN", 2)
            mp.setattr(surface, "ENCODE_VALUES", 2)
        yield


def archive(spool: Spool) -> tuple[bytes, SurfacePreview] | str:
    """The archive bytes and what the summary shows, or the error the spool is refused with."""
    try:
        run = normalize(spool)
    except DecodeError as exc:
        return f"DecodeError: {exc}"
    return archive_bytes(run.run_id, run.members()), run.preview


@needs_native
@pytest.mark.parametrize("path", SPOOLS, ids=lambda p: p.name)
def test_every_way_gives_the_same_archive_on_recorded_spools(path: Path) -> None:
    spool = read_spool(path)
    results = {}
    for name in MODES:
        for tiny in (False, True):
            with mode(name, tiny):
                results[name, tiny] = archive(spool)
    assert isinstance(results["general", False], tuple)
    for key, result in results.items():
        assert result == results["general", False], key


def scan_traffic(spool: Spool, name: str) -> tuple[int, int, int, int]:
    """Normalizing `spool` the `name` way: (records scanned, records `Scan._one` worked out, records
    the C fast path took, plain opens it worked out), the last two from its own counters."""
    c = accel.native
    assert c is not None
    seen = {"records": 0, "one": 0}
    one, file = scan.Scan._one, scan.Scan.file

    def counted_one(self: scan.Scan, *args: object) -> int:
        seen["one"] += 1
        return one(self, *args)  # type: ignore[arg-type]

    def counted_file(self: scan.Scan, *args: object, **kwargs: object) -> None:
        file(self, *args, **kwargs)  # type: ignore[arg-type]
        seen["records"] += self.captured

    with mode(name), pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan.Scan, "_one", counted_one)
        mp.setattr(scan.Scan, "file", counted_file)
        taken, plain = c.counters()
        normalize(spool)
        after = c.counters()
    return seen["records"], seen["one"], after[0] - taken, after[1] - plain


@needs_native
def test_the_c_fast_path_takes_records_on_recorded_spools() -> None:
    """Equal output (above) would hold for a C path that declined every record; this shows it acts.

    Every record is taken by the fast path or worked out by `Scan._one`, so the C's own count of
    what it took is checked against what Python did not do; and the C works out plain opens the
    Python twin leaves to `Scan._one` (it takes only remembered ones), so Python does less work
    with the C than with its twin.
    """
    totals = {"plain": 0, "one": 0, "twin_one": 0}
    for path in SPOOLS:
        spool = read_spool(path)
        records, one, taken, plain = scan_traffic(spool, "native")
        assert records > 0 and taken > 0 and taken + one == records, path.name
        _, twin_one, twin_taken, _ = scan_traffic(spool, "python")
        assert twin_taken == 0 and one <= twin_one, path.name
        totals["plain"] += plain
        totals["one"] += one
        totals["twin_one"] += twin_one
    assert totals["plain"] > 0 and totals["one"] < totals["twin_one"], totals


EXAMPLE = read_spool(DATA / "example.spool")
RECORDS = list(EXAMPLE.records)
RUN_TIDS = sorted({wire.HEADER.unpack_from(r)[2] for r in RECORDS} - set(EXAMPLE.header.control_pids)
                  - {EXAMPLE.header.shim_pid})
RECORDED = dict(zip(wire.HEADER_FIELDS, wire.HEADER.unpack_from(RECORDS[2]), strict=True))
AT_FDCWD = 0xFFFFFF9C
O_CREAT, O_EXCL, O_CLOEXEC, O_WRONLY = 0o100, 0o200, 0o2000000, 0o1
NAMES = st.sampled_from([
    b"f", b"abench-m-1", b"abench-c-001", b"tmp_obj_a1B2c3", b"tmpab12cd34", b"/tmp/rec/work/f",
    b"/tmp/rec/work//f", b"/tmp/rec/work/./f", b"/tmp/rec/work/", b"..", b".", b"a/b", b"../x",
    b"/proc/self/fd/3", b"/dev/fd/4", b"fd/3", b"/etc/ld.so.cache", b"/usr/lib/x.so", b"node_modules",
    b"/proc/self/root/tmp/rec/work/f", b"/proc/self/cwd/../f", b"/proc/1/environ", b"/dev/stdout",
    b"/dev/shm/x", b"../proc/self/cwd/f",
    b"x/node_modules/y", b"key=AKIAABCDEFGHIJKLMNOP", b"token=secretvalue123", b"caf\xc3\xa9", b"\xff\xfe",
    b"a\\b", b"new\nline", b"\x7f", b"\xc2\x85", b"e" * 300, b"",
]) | st.binary(max_size=24)


@st.composite
def fs_record(draw: st.DrawFn) -> bytes:
    """An open or a close of one of the run's threads (or a stranger), hostile names included, now
    and then an exec, a chdir or an unlink; sometimes cut short, or with a payload length that lies."""
    tid = draw(st.sampled_from(RUN_TIDS) | st.integers(0, (1 << 32) - 1))
    kind = draw(st.integers(0, 9))
    if kind <= 2:
        hook, data, a0, a1 = wire.HOOK_CLOSE, b"", draw(st.sampled_from([3, 4, 5, 1 << 33])), 0
    elif kind == 3:  # an exec drops the close-on-exec fds; a chdir moves the base of relative names
        hook = draw(st.sampled_from([wire.HOOK_EXEC, wire.HOOK_CHDIR]))
        data, a0, a1 = draw(st.sampled_from([b"/tmp/rec/work\0", b"sub\0", b"/usr/bin/true\0"])), tid, 0
    elif kind == 4:  # an unlink: a created name whose template calls it random becomes transient
        hook, data, a0, a1 = wire.HOOK_UNLINK, draw(NAMES) + b"\0", draw(st.sampled_from([AT_FDCWD, 3])), 0
    else:
        hook = wire.HOOK_OPEN
        name = draw(NAMES)
        data = name + (b"\0" if draw(st.integers(0, 9)) else b"\0junk\0")
        a0 = draw(st.sampled_from([AT_FDCWD, -100, 3, 4, 5, 99]))
        a1 = draw(st.sampled_from([0, O_CLOEXEC, O_CREAT | O_WRONLY, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC,
                                   0o20200000 | O_WRONLY, O_EXCL]))
    length = len(data) if draw(st.integers(0, 19)) else draw(st.integers(0, 0xFFFF))
    rec = wire.HEADER.pack(*({**RECORDED, "tgid": tid, "tid": tid, "hook": hook, "data_len": length,
                              "truncated": draw(st.sampled_from([0, 0, 0, 1, 2])),
                              "ret": draw(st.sampled_from([3, 4, 5, 0, -2, -13, -1])),
                              "a0": a0, "a1": a1, "a2": draw(st.sampled_from([0, 0o644, 0o4755])),
                              "a3": draw(st.sampled_from([0, 0, 8]))}[f] for f in wire.HEADER_FIELDS)) + data
    return rec if draw(st.integers(0, 29)) else rec[:draw(st.integers(0, len(rec)))]


@needs_native
@given(st.lists(fs_record(), max_size=30), st.integers(1, 3), st.booleans())
def test_every_way_gives_the_same_archive_on_generated_records(records: list[bytes], repeat: int,
                                                               tiny: bool) -> None:
    """Opens and closes after the recorded run's own records, repeated so the memo answers them."""
    spool = Spool(header=EXAMPLE.header, records=RECORDS + records * repeat, phases=EXAMPLE.phases,
                  trailer=EXAMPLE.trailer)
    results = {}
    for name in MODES:
        with mode(name, tiny):
            results[name] = archive(spool)
    assert results["native"] == results["general"]
    assert results["python"] == results["general"]


@needs_native
@given(st.binary(max_size=120), st.integers(0, 1 << 62), st.integers(0, 99),
       st.lists(st.binary(max_size=200), max_size=40))
def test_the_c_line_splicer_gives_the_python_bytes(head: bytes, seq: int, pid: int,
                                                   tails: list[bytes]) -> None:
    pid_part = b',"pid":%d,' % pid
    assert accel.native is not None
    assert accel.native.join_lines(head, seq, pid_part, tails) == join_lines(head, seq, pid_part, tails)


@needs_native
@given(st.lists(st.integers(0, 30), max_size=200))
def test_the_c_shape_index_gives_the_python_table(picks: list[int]) -> None:
    objects = [object() for _ in range(31)]
    shapes = [objects[k] for k in picks]
    assert accel.native is not None
    assert accel.native.index_shapes(shapes) == index_shapes(shapes)  # type: ignore[arg-type]


@needs_native
@given(st.lists(st.integers(0, 30), max_size=200), st.sets(st.integers(0, 30)))
def test_the_c_tail_lookups_answer_as_python(picks: list[int], known: set[int]) -> None:
    objects = [object() for _ in range(31)]
    shapes = [objects[k] for k in picks]
    by_id = {id(objects[k]): b"%d" % k for k in known}
    assert accel.native is not None
    unseen = accel.native.unseen_shapes(shapes, by_id)
    assert len(unseen) == len({id(s) for s in unseen})
    assert {id(s) for s in unseen} == {id(s) for s in collector.unseen_shapes(shapes, by_id)}  # type: ignore[arg-type]
    by_id.update({id(s): b"new" for s in unseen})
    assert accel.native.tails_of(shapes, by_id) == collector.tails_of(shapes, by_id)  # type: ignore[arg-type]


TELEMETRY_PIECES = ["/", "etc", "ld.so.cache", "lib", "lib64", "usr", "share", "locale", "proc", "sys",
                    "dev", "python3.11", "site-packages", ".zip", "pyvenv.cfg", "pybuilddir.txt", "x._pth",
                    ".rustup", "toolchains", "target", "debug", "x.so", "node_modules", "localtime", "ssl",
                    "openssl.cnf", "a", "-langpack", "\n"]


@given(st.lists(st.sampled_from(TELEMETRY_PIECES), max_size=10).map("".join) | st.text(max_size=40))
def test_the_telemetry_prefilter_never_clears_a_match(path: str) -> None:
    if telemetry._TELEMETRY.match(path):
        assert telemetry.could_be_telemetry(path)
    assert telemetry.is_telemetry_path(path) == bool(telemetry._TELEMETRY.match(path))


SECRET_PIECES = ["AKIA", "ABCDEFGHIJKLMNOP", "ghp_", "sk-", "xox", "AIza", "k_live_", "-----BEGIN ", "eyJ",
                 "=", "Bearer ", "KEY", "Secret", "TOKEN", "passw", "\u212a", "\u017f", "\u0130", "é",
                 "/tmp/x", " "]


TEXTS = st.none() | st.lists(st.sampled_from(SECRET_PIECES), max_size=6).map("".join) | st.text(max_size=30)


@pytest.mark.parametrize("name", ["native", "python"])
@given(st.lists(TEXTS, max_size=600), st.sampled_from([1, 7, redact.TEXTS_PER_BLOCK]))
def test_the_block_redaction_prefilter_answers_as_each_text_alone(name: str, texts: list[str | None],
                                                                  block: int) -> None:
    """In blocks of any size, with the C block test (`any_folded`) or its Python twin."""
    if name == "native" and accel.native is None:
        pytest.skip("normalizer/_fastscan is not built (make setup)")
    expected = [text is not None and redact._any_literal(text) for text in texts]
    with mode(name), pytest.MonkeyPatch.context() as mp:
        mp.setattr(redact, "TEXTS_PER_BLOCK", block)
        assert redact.may_hold_secrets(texts) == expected


@pytest.mark.parametrize("name", ["native", "python"])
def test_the_block_redaction_prefilter_finds_each_literal_among_clean_texts(name: str) -> None:
    """Every rule's literal, as written and upper-cased, alone in a block of clean paths."""
    if name == "native" and accel.native is None:
        pytest.skip("normalizer/_fastscan is not built (make setup)")
    exact, folded = redact._literals() or ((), ())
    clean = ["/usr/lib/x.so", None, "/tmp/abench-e-001"] * 100
    with mode(name):
        for literal in exact + folded:
            assert redact._any_literal(f"/w/{literal}1")  # as written, it is always flagged
            for text in (f"/w/{literal}1", f"/w/{literal.upper()}1"):
                expected = [False] * len(clean) + [redact._any_literal(text)] + [False] * len(clean)
                assert redact.may_hold_secrets([*clean, text, *clean]) == expected, text


META_POOL = [None, open_meta(0, 0, 0, 3), open_meta(0o1 | 0o100, 0o644, 0, 4), open_meta(0o2, 0, 0, -2),
             open_meta(0o2 | 0o100 | 0o200, 0o600, 0, -13), open_meta(0o20200000 | 0o2, 0o600, 5, 0)]
KIND_POOL = [(1, "openat"), (10, "file_blocked"), (2, "connect"), (11, "connect_blocked"), (6, "event_6"),
             (7, "event_7"), (4, "exec"), (120, "event_120")]
VALUES = st.none() | st.text(max_size=30) | st.sampled_from(
    ['/w/"q"', "a\\b", "\x7f", "\x00", "tab\there", "caf\u00e9", "\u2028", "\U0001f600", "/w/~1", ""])


@st.composite
def shapes_and_values(draw: st.DrawFn) -> tuple[list[Classified], list[str | None]]:
    """Shapes of any kind and metadata (shared objects, as the scan hands them) and the final values."""
    pool = [Classified(t, kind, draw(VALUES), draw(st.sampled_from(META_POOL)), 0, 0)
            for t, kind in draw(st.lists(st.sampled_from(KIND_POOL), min_size=1, max_size=8))]
    shapes = draw(st.lists(st.sampled_from(pool), max_size=40))
    return shapes, [draw(VALUES) for _ in shapes]


@needs_native
@given(shapes_and_values())
def test_the_c_tails_give_the_python_bytes(case: tuple[list[Classified], list[str | None]]) -> None:
    shapes, values = case
    c_lines, py_lines = KernelLines("r"), KernelLines("r")
    assert accel.native is not None
    c_tails = accel.native.shape_tails(shapes, values, c_lines._frames, c_lines.frame, ENCODE)
    assert c_tails == shape_tails(shapes, values, py_lines._frames, py_lines.frame, ENCODE)
    assert c_lines._frames == py_lines._frames


@needs_native
@given(shapes_and_values())
def test_the_c_collector_gathers_what_python_does(case: tuple[list[Classified], list[str | None]]) -> None:
    shapes, values = case
    c_sets, py_sets = {k: set() for k in collector.VALUE_SETS}, {k: set() for k in collector.VALUE_SETS}
    c_kinds: set[str] = set()
    py_kinds: set[str] = set()
    assert accel.native is not None
    accel.native.collect_values(shapes, values, c_kinds, collector.routes(c_sets), ("write", "read_write"))
    collector.collect_values(shapes, values, py_kinds, collector.routes(py_sets), ("write", "read_write"))
    assert (c_sets, c_kinds) == (py_sets, py_kinds)


@needs_native
@given(st.lists(st.binary(min_size=1, max_size=30), min_size=1, max_size=20), st.data())
def test_the_c_indexed_splicer_gives_the_python_bytes(tails: list[bytes], data: st.DataObject) -> None:
    order = data.draw(st.permutations(range(len(tails))))  # the block need not be in table order
    block, at = b"", {}
    for i in order:
        at[i] = (len(block), len(block) + len(tails[i]))
        block += tails[i]
    spans = array("Q", [x for i in range(len(tails)) for x in at[i]]).tobytes()
    picks = data.draw(st.lists(st.integers(0, len(tails) - 1), max_size=50))
    indexes = array("Q", picks).tobytes()
    start = data.draw(st.integers(0, len(picks)))
    count = data.draw(st.integers(0, len(picks) - start))
    seq = data.draw(st.integers(0, 1 << 40))
    assert accel.native is not None
    expected = join_lines(b"H", seq, b",P,", [tails[i] for i in picks[start:start + count]])
    assert join_indexed(b"H", seq, b",P,", block, spans, indexes, start, count) == expected
    assert accel.native.join_indexed(b"H", seq, b",P,", block, spans, indexes, start, count) == expected


@needs_native
@pytest.mark.parametrize("spans, indexes, start, count", [
    ([0, 2], [1], 0, 1),  # no shape 1
    ([0, 9], [0], 0, 1),  # past the block
    ([2, 1], [0], 0, 1),  # a span that ends before it starts
    ([0, 2], [0], 0, 2),  # more than there are
    ([0, 2], [0], 2, 0),  # a start past the end
])
def test_the_c_indexed_splicer_refuses_what_is_out_of_bounds(spans: list[int], indexes: list[int],
                                                             start: int, count: int) -> None:
    assert accel.native is not None
    with pytest.raises(ValueError, match="join_indexed"):
        accel.native.join_indexed(b"H", 0, b",P,", b"ab", array("Q", spans).tobytes(),
                                  array("Q", indexes).tobytes(), start, count)


def _open_record(tid: int, name: bytes) -> bytes:
    """A failed open (ENOENT) of `name` relative to the cwd by thread `tid`."""
    fields = {**RECORDED, "tgid": tid, "tid": tid, "hook": wire.HOOK_OPEN, "data_len": len(name) + 1,
              "truncated": 0, "ret": -2, "a0": AT_FDCWD, "a1": 0, "a2": 0, "a3": 0}
    return wire.HEADER.pack(*(fields[f] for f in wire.HEADER_FIELDS)) + name + b"\0"


def _redacted_count(spool: Spool) -> int:
    note = next(n for n in normalize(spool).health.notes if n.startswith("redaction:"))
    return int(note.split("redacted_count=")[1].split()[0])


@pytest.mark.parametrize("name", ["native", "python"])
def test_secrets_in_prepared_chunks_are_redacted_once_per_occurrence(name: str) -> None:
    """Stage A leaves a value that may hold a secret to stage B, which redacts it once per
    occurrence (the tally counts occurrences), in chunks where it repeats; a value that only
    looks suspect ("monkey") is written as it is. Every byte as when nothing is prepared."""
    if name == "native" and accel.native is None:
        pytest.skip("normalizer/_fastscan is not built (make setup)")
    tid = next(iter(build.scan(EXAMPLE).scan.tree.tasks))
    names = [b"key=AKIAABCDEFGHIJKLMNOP"] * 5 + [b"plain"] * 3 + [b"monkey"] * 2 \
        + [b"token=secretvalue123"] * 2
    spool = Spool(header=EXAMPLE.header, records=RECORDS + [_open_record(tid, n) for n in names * 2],
                  phases=EXAMPLE.phases, trailer=EXAMPLE.trailer)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build, "SPILL_EVERY", 7)
        with mode("general"):
            expected, count = archive(spool), _redacted_count(spool)
        settled = []
        settle = collector.Collector._settle
        mp.setattr(collector.Collector, "_settle", lambda self, *a: settled.append(1) or settle(self, *a))
        with mode(name):
            assert archive(spool) == expected
            assert _redacted_count(spool) == count
    base = _redacted_count(EXAMPLE)
    assert count >= base + 14  # each of the 14 secret opens redacted, none memoized away
    assert settled  # the prepared chunks' pending values were worked out in stage B


def test_prepared_chunks_give_the_same_lines_under_another_run_id() -> None:
    """Stage A prepares tails under the spool's run id; `finish` may be given another (the live
    pass, `normalize --run-id`): the tails hold no run id, so the bytes are the same."""
    results, adopted = [], []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build, "SPILL_EVERY", 3)
        adopt = collector.Collector.adopt
        mp.setattr(collector.Collector, "adopt", lambda self, p: adopted.append(1) or adopt(self, p))
        for prepare in (True, False):
            mp.setattr(build, "PREPARE", prepare)
            run = normalize(EXAMPLE, run_id="another-run")
            results.append((archive_bytes(run.run_id, run.members()), run.kernel.read_bytes()))
    assert results[0] == results[1]
    assert results[0][1].count(b'"run_id":"another-run"') == run.kernel.count > 3
    assert adopted == [1]  # the first way took the prepared chunks


def _fs_record(tid: int, hook: int, name: bytes, flags: int, ret: int) -> bytes:
    """A record of `hook` on `name` relative to the cwd by thread `tid`."""
    fields = {**RECORDED, "tgid": tid, "tid": tid, "hook": hook, "data_len": len(name) + 1,
              "truncated": 0, "ret": ret, "a0": AT_FDCWD, "a1": flags, "a2": 0o644, "a3": 0}
    return wire.HEADER.pack(*(fields[f] for f in wire.HEADER_FIELDS)) + name + b"\0"


@pytest.mark.parametrize("exclusive", [False, True])
def test_a_random_name_created_on_the_fast_path_is_followed(exclusive: bool) -> None:
    """Plain creates teach the scan their open metadata; the next creates with it are worked out
    on the fast path (in C), and a name a template calls random must still be followed: created
    and removed, it becomes `~N` in every way ("data.Xy12Zq" only when created exclusively)."""
    tid = next(iter(build.scan(EXAMPLE).scan.tree.tasks))
    flags = O_CREAT | O_WRONLY | (O_EXCL if exclusive else 0)
    names = [b"plain-a", b"plain-b", b"data.Xy12Zq", b"tmpab12cd34", b"plain-c"]
    records = [_fs_record(tid, wire.HOOK_OPEN, n, flags, 5) for n in names]
    records += [_fs_record(tid, wire.HOOK_UNLINK, n, 0, 0) for n in names]
    spool = Spool(header=EXAMPLE.header, records=RECORDS + records, phases=EXAMPLE.phases,
                  trailer=EXAMPLE.trailer)
    results = {}
    for name in MODES:
        with mode(name):
            results[name] = archive(spool)
            layer = normalize(spool).kernel.read_bytes()
            assert (b"tmp~" in layer, b"data.~" in layer, b"plain-c" in layer) == (True, exclusive, True)
    assert results["native"] == results["general"] == results["python"]
