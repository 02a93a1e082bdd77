"""The pairing of kernel file records with the opens they belong to (normalizer/kernelpaths.py).

Pure: raw records made by hand, and the recorded example run (tests/data/example.spool) with kernel
records put where the monitor's security_file_open program writes them (inside the open, before
its exit). The attacks come first: another thread's kernel record, a record whose exit was lost, a
held interruption, a kernel answer that is no file's name.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from ebpf.wire import (
    HEADER,
    HOOK_CLOSE,
    HOOK_EXECVE,
    HOOK_FILE_OPEN,
    HOOK_OPEN,
    HOOK_OPEN_BY_HANDLE,
    TRUNC_FIRST,
)
from normalizer import scan
from normalizer.build import normalize
from normalizer.kernelpaths import AT_FDCWD, KernelPaths, is_kernel_record
from spool.format import Spool, read_spool

DATA = Path(__file__).parent / "data"
HOME_NS, OTHER_NS = 4026531841, 4026532999


def rec(ts: int, tid: int, hook: int, data: bytes = b"", ret: int = 0, a0: int = 0, a1: int = 0,
        a2: int = 0, a3: int = 0, cut: int = 0, tgid: int | None = None) -> bytes:
    return HEADER.pack(ts, tgid or tid, tid, hook, len(data), cut, 1, ret, a0, a1, a2, a3) + data


def kernel(ts: int, tid: int, path: bytes, inside: int = HOOK_OPEN, dev: int = 5, ino: int = 9,
           ns: int = HOME_NS, tgid: int | None = None, f_flags: int = 0) -> bytes:
    return rec(ts, tid, HOOK_FILE_OPEN, path + b"\0", f_flags, dev, ino, ns, inside, tgid=tgid)


def opened(ts: int, tid: int, path: bytes, ret: int = 3, tgid: int | None = None) -> bytes:
    return rec(ts, tid, HOOK_OPEN, path + b"\0", ret, -100 & 0xFFFFFFFF, 0, 0, 0, tgid=tgid)


def path_of(record: bytes) -> bytes:
    return record[HEADER.size:].split(b"\0", 1)[0]


def paired(records: list[bytes]) -> list[bytes]:
    """The path each open record carries after the stage."""
    out = KernelPaths(active=True).rewrite(records)
    assert len(out) == len(records)
    return [path_of(r) for r in out if HEADER.unpack_from(r)[3] == HOOK_OPEN]


def test_another_threads_kernel_record_never_names_an_open() -> None:
    assert paired([kernel(10, 2, b"/real"), opened(20, 1, b"alias")]) == [b"alias"]


def test_a_kernel_record_whose_exit_was_lost_is_not_given_to_a_later_open() -> None:
    records = [kernel(10, 1, b"/first"), rec(15, 1, HOOK_CLOSE, a0=3), opened(20, 1, b"second")]
    assert paired(records) == [b"second"]


def test_a_failed_open_keeps_its_string_and_ends_the_wait() -> None:
    records = [kernel(10, 1, b"/real"), opened(20, 1, b"alias", ret=-13), opened(30, 1, b"next")]
    assert paired(records) == [b"alias", b"next"]


def test_a_held_interruption_predates_the_kernel_record_and_does_not_take_it() -> None:
    held = opened(5, 1, b"fifo", ret=-4)  # written at the next call's exit, stamped when interrupted
    assert paired([kernel(10, 1, b"/real"), held, opened(20, 1, b"alias")]) == [b"fifo", b"/real"]


def test_the_latest_kernel_record_of_the_call_wins() -> None:
    """An interrupted open restarted by the kernel (a fifo's, say) passes security_file_open again."""
    assert paired([kernel(10, 1, b"/before"), kernel(15, 1, b"/after"), opened(20, 1, b"x")]) == [b"/after"]


def test_a_record_made_inside_another_kind_of_call_does_not_pair() -> None:
    records = [kernel(10, 1, b"/by-handle", inside=HOOK_OPEN_BY_HANDLE), opened(20, 1, b"x")]
    assert paired(records) == [b"x"]


@pytest.mark.parametrize("answer", [b"pipe:[4242]", b"anon_inode:[eventfd]", b"/tmp/gone (deleted)", b""])
def test_an_answer_that_names_no_file_keeps_the_requested_string(answer: bytes) -> None:
    assert paired([kernel(10, 1, answer), opened(20, 1, b"/proc/self/fd/3")]) == [b"/proc/self/fd/3"]


def test_a_cut_kernel_path_is_not_used() -> None:
    cut = rec(10, 1, HOOK_FILE_OPEN, b"/very/long\0", 0, 5, 9, HOME_NS, HOOK_OPEN, cut=TRUNC_FIRST)
    assert paired([cut, opened(20, 1, b"x")]) == [b"x"]


def test_a_paired_open_is_absolute_and_whole() -> None:
    alias = rec(20, 1, HOOK_OPEN, b"rel\0", 3, 7, 0o100, 0, 0x10, cut=TRUNC_FIRST)  # dirfd 7, RESOLVE_IN_ROOT
    [_, out] = KernelPaths(active=True).rewrite([kernel(10, 1, b"/real/file"), alias])
    *_, dlen, cut, _, ret, a0, a1, _, a3 = HEADER.unpack_from(out)
    assert (path_of(out), dlen, cut, ret, a0, a1, a3) == (b"/real/file", 11, 0, 3, AT_FDCWD, 0o100, 0)


def test_another_mount_namespace_takes_the_name_the_run_saw_for_the_same_inode() -> None:
    records = [kernel(10, 1, b"/w/src/f", ino=9), opened(11, 1, b"src/f"),
               kernel(20, 2, b"/w/dst/f", ino=9, ns=OTHER_NS), opened(21, 2, b"dst/f"),
               kernel(30, 2, b"/w/dst/g", ino=10, ns=OTHER_NS), opened(31, 2, b"dst/g")]
    assert paired(records) == [b"/w/src/f", b"/w/src/f", b"/w/dst/g"]


def test_the_requested_string_is_kept_where_it_names_the_file_differently() -> None:
    stage = KernelPaths(active=True)
    stage.rewrite([kernel(10, 1, b"/w/secret"), opened(11, 1, b"link"),
                   kernel(12, 1, b"/w/secret"), opened(13, 1, b"/proc/self/root/w/secret"),
                   kernel(14, 1, b"/w/plain"), opened(15, 1, b"sub/../plain"),
                   kernel(16, 1, b"/w/abs"), opened(17, 1, b"/w//abs")])
    assert stage.requested == {"/w/secret": "link"}  # the first that differs; the lexical ones do not


def test_the_stage_is_deterministic_and_one_for_one() -> None:
    records = [kernel(10, 1, b"/a"), kernel(11, 2, b"/b"), opened(12, 2, b"b"), opened(13, 1, b"a"),
               kernel(14, 1, b"/c", inside=0), opened(15, 1, b"c")]
    first, again = KernelPaths(active=True).rewrite(records), KernelPaths(active=True).rewrite(records)
    assert first == again and len(first) == len(records)
    assert [path_of(r) for r in first if HEADER.unpack_from(r)[3] == HOOK_OPEN] == [b"/b", b"/a", b"c"]
    assert [is_kernel_record(r) for r in first] == [True, True, False, False, True, False]


# --- through the normalizer: the recorded example run ----------------------------------------


def example(extra: list[tuple[int, bytes]], source: str = "kernel") -> Spool:
    """The example spool with `extra` (index, record) inserted before the index's record, in list
    order, its trailer saying `source`."""
    spool = read_spool(DATA / "example.spool")
    records = list(spool.records)
    for i, r in reversed(sorted(extra, key=lambda x: x[0])):  # equal indexes keep their order
        records.insert(i, r)
    return msgspec.structs.replace(spool, records=records,
                                   trailer=msgspec.structs.replace(spool.trailer, path_source=source))


def _index(spool: Spool, path: bytes) -> tuple[int, bytes]:
    """(index, record) of the example's open of `path`."""
    return next((i, r) for i, r in enumerate(spool.records) if HEADER.unpack_from(r)[3] == HOOK_OPEN
                and path_of(r) == path)


def lines(spool: Spool) -> list[tuple[int, str, str | None]]:
    return [(e.pid, e.kind, e.value) for e in normalize(spool).kernel_events]


@pytest.mark.parametrize("fast", [True, False])
def test_an_open_is_named_by_the_kernel_and_health_says_so(fast: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "FAST", fast)
    plain = read_spool(DATA / "example.spool")
    i, sub = _index(plain, b"/tmp/rec/work/sub")  # python's open of its working directory
    ts, tgid, tid = HEADER.unpack_from(sub)[:3]
    spool = example([(i, kernel(ts - 1, tid, b"/tmp/rec/elsewhere", tgid=tgid))])
    got = lines(spool)
    assert (3, "openat", "/tmp/rec/elsewhere") in got and (3, "openat", "/tmp/rec/work/sub") not in got
    assert len(got) == len(lines(plain))
    notes = normalize(spool).health.notes
    assert "s2_path_source: path_source=kernel kernel_named_opens=1" in notes
    assert "s2_path_source: path_source=user_memory" in normalize(plain).health.notes


def test_an_open_outside_any_traced_call_is_an_event_85_line_and_an_execs_is_none() -> None:
    plain = read_spool(DATA / "example.spool")
    i, sub = _index(plain, b"/tmp/rec/work/sub")
    ts, tgid, tid = HEADER.unpack_from(sub)[:3]
    spool = example([(i, kernel(ts - 3, tid, b"/etc/shadow", inside=0, tgid=tgid)),
                     (i, kernel(ts - 2, tid, b"/etc/cron.d/x", inside=0, tgid=tgid, f_flags=0o100001)),
                     (i, kernel(ts - 1, tid, b"/usr/bin/python3", inside=HOOK_EXECVE, tgid=tgid))])
    got = lines(spool)
    assert (3, "event_85", "/etc/shadow") in got
    run = normalize(spool)
    modes = {e.value: (e.access_mode, e.flags) for e in run.kernel_events if e.kind == "event_85"}
    assert modes == {"/etc/shadow": ("read", 0), "/etc/cron.d/x": ("write", 0o100001)}
    assert "/etc/cron.d/x" in run.preview.written.first and "/etc/shadow" not in run.preview.written.first
    assert [v for _, _, v in got].count("/usr/bin/python3") == 1  # the exec line only
    assert (3, "openat", "/tmp/rec/work/sub") in got  # neither record was made inside that open


def test_an_open_by_handle_is_named_by_the_kernel() -> None:
    plain = read_spool(DATA / "example.spool")
    i, sub = _index(plain, b"/tmp/rec/work/sub")
    ts, tgid, tid = HEADER.unpack_from(sub)[:3]
    handle = rec(ts - 1, tid, HOOK_OPEN_BY_HANDLE, b"", 5, 3, 0, tgid=tgid)
    spool = example([(i, kernel(ts - 2, tid, b"/tmp/rec/handled", inside=HOOK_OPEN_BY_HANDLE, tgid=tgid)),
                     (i, handle)])
    assert (3, "event_141", "/tmp/rec/handled") in lines(spool)
    assert (3, "event_141", None) in lines(example([(i, handle)]))


def test_a_recovered_spool_whose_trailer_does_not_say_is_still_kernel_named() -> None:
    """spool/recover.py writes the trailer of a runner that died: it knows nothing of the monitor."""
    plain = read_spool(DATA / "example.spool")
    i, sub = _index(plain, b"/tmp/rec/work/sub")
    ts, tgid, tid = HEADER.unpack_from(sub)[:3]
    spool = example([(i, kernel(ts - 1, tid, b"/tmp/rec/elsewhere", tgid=tgid))], source="user_memory")
    assert "s2_path_source: path_source=kernel kernel_named_opens=1" in normalize(spool).health.notes
