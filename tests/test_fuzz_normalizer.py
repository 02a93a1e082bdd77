"""Property-based fuzzing of the normalizer stages, fed generated raw events (no root, no BPF).

The agent under observation chooses what the kernel records: any pid
relation, any hook order, any bytes in a path or a sockaddr, any return
value. Whatever the records, normalizing gives archive members that pass the
project's own conformance check, or the normalizer's DecodeError for a
record shorter than its header says. One refusal is by design: when the
command's root process never appears, health says cgroup_correlation
'failed', which Assay refuses, so `publish` refuses to write it (one line,
exit 125). The recorded example spool supplies the
header (control and shim pids) and the first real records, so generated
events land inside the run's process tree.
"""

from __future__ import annotations

import struct
from pathlib import Path

from hypothesis import event, example, given
from hypothesis import strategies as st

from ebpf import wire
from normalizer.build import normalize
from normalizer.decode import DecodeError
from runner.evidence.archive import MANIFEST, build_manifest
from runner.evidence.conformance.base import HEALTH
from runner.evidence.validate import validate_members
from spool.format import SdkMessage, Spool, read_spool

EXAMPLE = read_spool(Path(__file__).resolve().parent / "data" / "example.spool")
RECORDS = list(EXAMPLE.records)
CONTROL, SHIM = EXAMPLE.header.control_pids[0], EXAMPLE.header.shim_pid
PIDS = [CONTROL, SHIM, *range(SHIM + 1, SHIM + 6)]
HOOKS = sorted(wire.HOOK_NAMES)
RECORDED = dict(zip(wire.HEADER_FIELDS, wire.HEADER.unpack_from(RECORDS[2]), strict=True))
BASE_TS = RECORDED["ts"]
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
SOCKADDRS = [struct.pack("<H", 2) + struct.pack(">H", 443) + bytes([10, 0, 0, 1]) + b"\0" * 8,
             struct.pack("<H", 10) + struct.pack(">H", 53) + b"\0" * 4 + b"\0" * 15 + b"\1" + b"\0" * 4,
             struct.pack("<H", 1) + b"/run/x.sock\0", b"\2\0"]
PAYLOADS = (st.sampled_from([b"", b"/tmp/rec/work/f\0", b"/etc/hostname\0", b"rel/x\0", b"/a\0/b\0",
                             b"a\0b\0c\0", b"/tmp/rec/work/\xff\n\x1b[31m\0", b"\0", b"/" * 300 + b"\0",
                             *SOCKADDRS])
            | st.binary(max_size=80))
ARGS = st.sampled_from([0, 1, 2, 3, -1, 4294967196, 524288, 577, 0o644, SHIM + 1, SHIM + 2, 1 << 40]) | I64


def header(**fields: int) -> bytes:
    """A record header in wire order; fields not given (the run key) are the recorded run's."""
    return wire.HEADER.pack(*(fields.get(name, RECORDED[name]) for name in wire.HEADER_FIELDS))


@st.composite
def raw_record(draw: st.DrawFn) -> bytes:
    data = draw(PAYLOADS)
    tgid = draw(st.sampled_from(PIDS) | st.integers(0, (1 << 32) - 1))
    tid = tgid if draw(st.booleans()) else draw(st.sampled_from(PIDS))
    length = len(data) if draw(st.integers(0, 19)) else draw(st.integers(0, 0xFFFF))  # rarely a lying length
    return header(ts=BASE_TS + draw(st.integers(0, 10**9)), tgid=tgid, tid=tid,
                  hook=draw(st.sampled_from(HOOKS) | st.integers(0, 0xFFFF)), data_len=length,
                  truncated=draw(st.integers(0, 15)), ret=draw(st.sampled_from([0, 3, -2, -13, -1]) | I64),
                  a0=draw(ARGS), a1=draw(ARGS), a2=draw(ARGS), a3=draw(ARGS)) + data


SDK = st.builds(SdkMessage, ts=st.integers(BASE_TS, BASE_TS + 10**9),
                event=st.sampled_from(["tool_call_started", "tool_call_finished", "x", ""])
                | st.text(max_size=8),
                sdk_name=st.text(max_size=8), tool=st.none() | st.text(max_size=8),
                tool_call_id=st.none() | st.sampled_from(["c1", "c2", ""]) | st.text(max_size=8),
                status=st.none() | st.sampled_from(["ok", "error"]),
                decision=st.none() | st.sampled_from(["allow"]))


def _check(records: list[bytes], sdk: list[SdkMessage]) -> None:
    spool = Spool(header=EXAMPLE.header, records=records, phases=EXAMPLE.phases, trailer=EXAMPLE.trailer,
                  sdk=sdk)
    try:
        run = normalize(spool)
    except DecodeError as exc:
        assert str(exc) and "\n" not in str(exc)
        event("refused: DecodeError")
        return
    members = {name: m if isinstance(m, bytes) else m.read_bytes() for name, m in run.members().items()}
    problems = validate_members({MANIFEST: build_manifest(run.run_id, run.members()), **members})
    if run.health.cgroup_correlation == "failed":
        assert problems == [f"{HEALTH}: cgroup_correlation 'failed' is refused by Assay (health.rs:231-248)"]
        event("refused: the root process never appeared")
        return
    assert problems == [], problems[:5]
    event(f"normalized, {run.kernel.count} kernel events > 0: {run.kernel.count > 0}")


OPENAT2_RESOLVE_ALL_BITS = header(ts=BASE_TS, tgid=SHIM + 1, tid=SHIM + 1, hook=wire.HOOK_OPEN, data_len=14,
                                  truncated=0, ret=-22, a0=-100, a1=0, a2=0, a3=-1)
"""openat2 with how.resolve = 2**64 - 1: the kernel refuses it (EINVAL), but the record carried -1 and
the kernel line got `resolve: -1`, which the contract refuses, so the whole archive was refused."""


@given(prefix=st.integers(0, len(RECORDS)), records=st.lists(raw_record(), max_size=30),
       sdk=st.lists(SDK, max_size=4))
@example(prefix=2, records=[OPENAT2_RESOLVE_ALL_BITS + b"/etc/hostname\0"], sdk=[])
def test_generated_raw_events_normalize_to_a_valid_archive(prefix: int, records: list[bytes],
                                                            sdk: list[SdkMessage]) -> None:
    _check(RECORDS[:prefix] + records, sdk)


@given(records=st.lists(raw_record(), max_size=30),
       positions=st.lists(st.integers(0, len(RECORDS)), max_size=30))
@example(records=[], positions=[])
def test_raw_events_spliced_into_a_real_capture_normalize(records: list[bytes], positions: list[int]) -> None:
    """Generated records at random places of a real run: exits before execs, opens after exits."""
    merged = list(RECORDS)
    for record, at in zip(records, positions, strict=False):
        merged.insert(at, record)
    _check(merged, [])
