"""The normalizer's fast paths are speed only: the C accelerator, its pure-Python fallback and the
general way alone give the same archive bytes, on every recorded spool and on generated records.

normalizer/scan.py takes closes and remembered opens without a Python object per record, in C
when normalizer/fastscan.c is built (normalizer/accel.py) and in Python otherwise; the prefilters
(telemetry, redaction) must never clear what the full test would catch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebpf import wire
from normalizer import accel, build, redact, scan, telemetry
from normalizer.buckets import index_shapes
from normalizer.build import normalize
from normalizer.decode import DecodeError
from normalizer.kernel_lines import join_lines
from runner.evidence.archive import archive_bytes
from spool.format import Spool, read_spool

DATA = Path(__file__).resolve().parent / "data"
SPOOLS = sorted(DATA.glob("*.spool"))
MODES = ("native", "python", "general")
"""The C fast path (when built), the Python twin, and the general way for every record."""

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
        if tiny:
            mp.setattr(scan, "OPEN_MEMO", 2)
            mp.setattr(build, "SPILL_EVERY", 3)
            mp.setattr(build, "MEMO_ENTRIES", 2)
        yield


def archive(spool: Spool) -> tuple[bytes, list[str], list[str]] | str:
    """The archive bytes and the summary lists, or the error the spool is refused with."""
    try:
        run = normalize(spool)
    except DecodeError as exc:
        return f"DecodeError: {exc}"
    return archive_bytes(run.run_id, run.members()), run.written, run.blocked


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
    b"x/node_modules/y", b"key=AKIAABCDEFGHIJKLMNOP", b"token=secretvalue123", b"caf\xc3\xa9", b"\xff\xfe",
    b"a\\b", b"new\nline", b"\x7f", b"\xc2\x85", b"e" * 300, b"",
]) | st.binary(max_size=24)


@st.composite
def fs_record(draw: st.DrawFn) -> bytes:
    """An open or a close of one of the run's threads (or a stranger), hostile names included, now
    and then an exec or a chdir; sometimes cut short, or with a payload length that lies."""
    tid = draw(st.sampled_from(RUN_TIDS) | st.integers(0, (1 << 32) - 1))
    kind = draw(st.integers(0, 9))
    if kind <= 2:
        hook, data, a0, a1 = wire.HOOK_CLOSE, b"", draw(st.sampled_from([3, 4, 5, 1 << 33])), 0
    elif kind == 3:  # an exec drops the close-on-exec fds; a chdir moves the base of relative names
        hook = draw(st.sampled_from([wire.HOOK_EXEC, wire.HOOK_CHDIR]))
        data, a0, a1 = draw(st.sampled_from([b"/tmp/rec/work\0", b"sub\0", b"/usr/bin/true\0"])), tid, 0
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
    assert {id(s) for s in unseen} == {id(s) for s in build.unseen_shapes(shapes, by_id)}  # type: ignore[arg-type]
    by_id.update({id(s): b"new" for s in unseen})
    assert accel.native.tails_of(shapes, by_id) == build.tails_of(shapes, by_id)  # type: ignore[arg-type]


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


@given(st.lists(TEXTS, max_size=600))
def test_the_block_redaction_prefilter_answers_as_each_text_alone(texts: list[str | None]) -> None:
    expected = [text is not None and redact._any_literal(text) for text in texts]
    assert redact.may_hold_secrets(texts) == expected
