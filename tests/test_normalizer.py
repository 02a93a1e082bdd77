"""Pure normalizer stages, fed with recorded raw spools and synthetic records.

No root and no BPF: these pin down the rules that make the output honest
(telemetry filter, open metadata, endpoints) and deterministic (order and
pids independent of arrival order and host pid values).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import msgspec
import pytest

from ebpf.wire import HEADER, HOOK_EXEC, HOOK_NEWTASK, HOOK_OPEN
from normalizer import build
from normalizer.build import normalize
from normalizer.classify import endpoint, open_meta
from normalizer.decode import RawEvent, decode
from normalizer.health import CaptureFacts, cgroup_correlation, network_coverage
from normalizer.tree import TreeBuilder, number_tree
from spool.format import Spool, SpoolError, SpoolTrailer, encode_frame, read_spool

DATA = Path(__file__).parent / "data"


def load(name: str) -> Spool:
    return read_spool(DATA / f"{name}.spool")


def members(spool: Spool) -> dict[str, bytes]:
    return {k: v if isinstance(v, bytes) else v.read_bytes() for k, v in normalize(spool).members().items()}


def test_recorded_example_normalizes_to_the_expected_evidence() -> None:
    run = normalize(load("example"))
    got = [(e.pid, e.kind, e.value, e.access_mode or None) for e in run.kernel_events]
    assert got == [
        (1, "exec", "/usr/bin/sh", None),
        (1, "openat", "/tmp/rec/work/sub/out.txt", "write"),
        (2, "exec", "/usr/bin/cat", None),
        (2, "openat", "/etc/hostname", "read"),
        (3, "exec", "/usr/bin/python3", None),
        (3, "openat", "/tmp/rec/work/sub", "read"),
        (3, "connect", "127.0.0.1:9", None),
    ]
    assert run.health.cgroup_correlation == "clean"
    assert run.surface.decoded().process_execs == ["/usr/bin/cat", "/usr/bin/python3", "/usr/bin/sh"]


def test_threads_and_children_are_ordered_by_tree_then_thread() -> None:
    run = normalize(load("threads"))
    writes = [(e.pid, e.value and Path(e.value).name) for e in run.kernel_events if e.access_mode == "write"]
    expected = [(1, f"t{t}-{j}.txt") for t in range(4) for j in range(5)]
    expected += [(2 + i, f"child{i}.txt") for i in range(3)]
    assert writes == expected


def causal_interleaving(records: list[bytes], seed: int) -> list[bytes]:
    """Another ring order the kernel could have produced for the same run.

    Threads interleave at random, but each thread keeps its own order and a
    task's records only start after the record that created it, which is
    what the ring buffer guarantees (docs/architecture.md).
    """
    per_task: dict[int, list[bytes]] = {}
    created: dict[int, int] = {}
    for i, rec in enumerate(records):
        e = HEADER.unpack_from(rec)
        per_task.setdefault(e[2], []).append(rec)
        if e[3] == HOOK_NEWTASK:
            created.setdefault(e[8], i)
    ready = {tid for tid in per_task if tid not in created}
    cursor = dict.fromkeys(per_task, 0)
    rng, out = random.Random(seed), []
    while ready:
        tid = rng.choice(sorted(ready))
        rec = per_task[tid][cursor[tid]]
        out.append(rec)
        cursor[tid] += 1
        if cursor[tid] == len(per_task[tid]):
            ready.discard(tid)
        e = HEADER.unpack_from(rec)
        if e[3] == HOOK_NEWTASK and e[8] in per_task and created.get(e[8]) is not None:
            ready.add(e[8])
    assert len(out) == len(records)
    return out


@pytest.mark.parametrize("name", ["example", "threads"])
@pytest.mark.parametrize("seed", [1, 7, 42])
def test_interleaving_across_threads_does_not_matter(name: str, seed: int) -> None:
    spool = load(name)
    records = list(spool.records)
    reordered = causal_interleaving(records, seed)
    assert reordered != records
    assert members(msgspec.structs.replace(spool, records=reordered)) == members(spool)


@pytest.mark.parametrize("name", ["example", "threads"])
def test_spilling_evidence_to_disk_changes_nothing(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = load(name)
    in_memory = members(spool)
    monkeypatch.setattr(build, "SPILL_EVERY", 2)
    assert members(spool) == in_memory


def _shift_pids(record: bytes, offset: int) -> bytes:
    ts, tgid, tid, hook, dlen, trunc, run, ret, a0, a1, a2, a3 = HEADER.unpack_from(record)
    if hook in (HOOK_NEWTASK, HOOK_EXEC):
        a0 += offset
    head = HEADER.pack(ts, tgid + offset, tid + offset, hook, dlen, trunc, run, ret, a0, a1, a2, a3)
    return head + record[HEADER.size:]


@pytest.mark.parametrize("name", ["example", "threads"])
def test_host_pid_values_do_not_matter(name: str) -> None:
    spool = load(name)
    offset = 100_000
    header = msgspec.structs.replace(
        spool.header,
        control_pids=[p + offset for p in spool.header.control_pids],
        shim_pid=spool.header.shim_pid + offset,
    )
    moved = msgspec.structs.replace(
        spool, header=header, records=[_shift_pids(r, offset) for r in spool.records])
    assert members(moved) == members(spool)


def _raw(ts: int, tgid: int, tid: int, hook: int, a0: int = 0, a1: int = 0,
         data: bytes = b"", ret: int = 0) -> RawEvent:
    return RawEvent(ts, tgid, tid, hook, ret, a0, a1, 0, 0, data, False, ts)


def test_tree_numbers_follow_creation_order_not_timing() -> None:
    """Two children that each fork a grandchild: numbering is depth-first either way."""
    shim = 10

    def numbers(grandchild_order: list[tuple[int, int]]) -> dict[int, int]:
        events = [_raw(1, shim, shim, HOOK_NEWTASK, a0=100),
                  _raw(2, 100, 100, HOOK_NEWTASK, a0=200),
                  _raw(3, 100, 100, HOOK_NEWTASK, a0=300)]
        ts = 4
        for parent, child in grandchild_order:
            events.append(_raw(ts, parent, parent, HOOK_NEWTASK, a0=child))
            ts += 1
        tree = TreeBuilder([], shim)
        threads = {}
        for item in tree.attribute(events):
            threads[item.event.tid] = item.thread
        for child_tid in (200, 300, 400, 500):
            threads.setdefault(child_tid, tree._tasks[child_tid])
        number_tree(tree.root)
        return {tid: t.process.number for tid, t in tree._tasks.items()}

    first = numbers([(200, 400), (300, 500)])
    second = numbers([(300, 500), (200, 400)])
    assert first == second == {100: 1, 200: 2, 400: 3, 300: 4, 500: 5}


def test_events_of_unknown_tasks_make_correlation_partial() -> None:
    tree = TreeBuilder([], shim_pid=10)
    events = [_raw(1, 10, 10, HOOK_NEWTASK, a0=100), _raw(2, 999, 999, HOOK_OPEN, data=b"/x\0")]
    assert list(tree.attribute(events)) == []
    assert tree.stats.unattributed_events == 1
    facts = CaptureFacts({}, {}, 2, tree.stats.unattributed_events, True, 0)
    assert cgroup_correlation(facts) == "partial"
    assert cgroup_correlation(CaptureFacts({}, {}, 0, 0, False, 0)) == "failed"


@pytest.mark.parametrize(("flags", "mode", "access", "ops", "has_mode"), [
    (0o0, 0, "read", [], False),
    (0o1 | 0o100 | 0o1000, 0o644, "write", ["create", "truncate"], True),
    (0o1 | 0o100 | 0o2000, 0o644, "write", ["create", "append"], True),  # upstream order, not sorted
    (0o2 | 0o100 | 0o200 | 0o400, 0o600, "read_write", ["create", "exclusive"], True),
    (0o2 | 0o100 | 0o200, 0o600, "read_write", None, True),  # O_EXCL without O_NOCTTY: no hints
    (0o2 | 0o400, 0, "read_write", None, False),  # O_NOCTTY alone: Assay would read `exclusive`
    (0o1 | 0o2000, 0, "write", ["append"], False),
    (0o3, 0, "unknown", [], False),
    (0o200000, 0, "read", [], False),  # O_DIRECTORY: in `flags` only, not an upstream hint
    (0o20200000 | 0o2, 0o600, "read_write", [], True),  # O_TMPFILE likewise
])
def test_open_metadata(flags: int, mode: int, access: str, ops: list[str] | None, has_mode: bool) -> None:
    """A successful open: derived hints, and neither status nor return_value (schema allOf/5)."""
    meta = open_meta(flags, mode, 0, 3)
    hints = None if meta.operation_flags is None else list(meta.operation_flags)
    assert (meta.flags, meta.access_mode, hints) == (flags, access, ops)
    assert (meta.mode is not None) == has_mode
    assert (meta.status, meta.return_value) == (None, None)


def test_failed_open_keeps_errno() -> None:
    meta = open_meta(0, 0, 0, -2)
    assert (meta.status, meta.return_value) == ("error", -2)


def _sockaddr_in(ip: bytes, port: int) -> bytes:
    return struct.pack("<H", 2) + struct.pack(">H", port) + ip + b"\0" * 8


@pytest.mark.parametrize(("raw", "expected"), [
    (_sockaddr_in(bytes([10, 0, 0, 1]), 443), "10.0.0.1:443"),
    (struct.pack("<H", 10) + struct.pack(">H", 80) + b"\0" * 4 + bytes(10) + b"\xff\xff"
     + bytes([127, 0, 0, 1]) + b"\0" * 4, "[::ffff:127.0.0.1]:80"),
    (struct.pack("<H", 1) + b"/run/x.sock\0", "unix:/run/x.sock"),
    (struct.pack("<H", 1) + b"\0name", "unix:@name"),
    (struct.pack("<H", 1), "unix:"),
    (struct.pack("<H", 16) + b"\0" * 10, None),
    (b"\x02", None),
])
def test_endpoints(raw: bytes, expected: str | None) -> None:
    assert endpoint(raw) == expected


def test_af_unspec_connect_is_not_evidence() -> None:
    spool = load("example")
    normalize(spool)  # the example normalizes as is
    connect = next(r for r in decode(spool.records) if r.hook == 2)
    unspec = HEADER.pack(connect.ts + 1, connect.tgid, connect.tid, 2, 16, 0, 0, 0, 3, 16, 0, 0) + bytes(16)
    again = msgspec.structs.replace(spool, records=[*spool.records, unspec])
    assert members(again) == members(spool)


def test_network_hook_drops_make_coverage_unknown() -> None:
    run = normalize(load("example"))
    facts = CaptureFacts({"sendto": 3}, {}, 0, 0, True, 0)
    kinds = {e.kind for e in run.kernel_events}
    assert network_coverage(kinds, facts) == ("unknown", "unknown")
    clean = CaptureFacts({}, {}, 0, 0, True, 0)
    assert network_coverage(kinds, clean) == ("connect_only", "diagnostic_only")
    assert network_coverage(set(), clean) == ("absent", "not_applicable")


def test_records_lost_between_kernel_and_spool_count_as_drops() -> None:
    spool = load("example")
    emitted = dict(spool.trailer.emitted)
    emitted["open"] += 5
    lossy = msgspec.structs.replace(
        spool, trailer=SpoolTrailer(spool.trailer.exit_code, spool.trailer.drops, emitted))
    health = normalize(lossy).health
    assert (health.kernel_layer, health.ringbuf_drops) == ("partial_ringbuf_drops", 5)
    assert "s2_kernel_drops: lost_in_transit=5" in health.notes


def test_truncated_spool_is_refused(tmp_path: Path) -> None:
    data = (DATA / "example.spool").read_bytes()
    cut = tmp_path / "cut.spool"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(SpoolError, match=r"torn frame|no trailer"):
        read_spool(cut)
    no_trailer = tmp_path / "no-trailer.spool"
    spool = load("example")
    no_trailer.write_bytes(encode_frame(spool.header))
    with pytest.raises(SpoolError, match="no trailer"):
        read_spool(no_trailer)


def test_a_root_command_without_a_write_policy_is_noted() -> None:
    """The recorded example ran as root with no policy: it could have changed its own evidence."""
    spool = load("example")
    note = "s4_command_privilege: uid=0 unrestricted_writes=true"
    assert note in normalize(spool).health.notes
    as_user = msgspec.structs.replace(spool, header=msgspec.structs.replace(spool.header, uid=1000))
    assert note not in normalize(as_user).health.notes
