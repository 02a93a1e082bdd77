"""Stage 1: raw ring-buffer records to typed `RawEvent`s."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

from ebpf.wire import HEADER


class RawEvent(msgspec.Struct, frozen=True, gc=False):
    """One kernel record, decoded but not interpreted.

    `arrival` is its position in ring order, the order the normalizer walks
    (causal: docs/architecture.md); `ts` is its runner-clock capture time,
    used only for correlation windows.
    """

    ts: int
    tgid: int
    tid: int
    hook: int
    ret: int
    a0: int
    a1: int
    a2: int
    a3: int
    data: bytes
    truncated: int
    """TRUNC_* bits (ebpf/wire.py): which strings of the payload were cut."""
    arrival: int


class DecodeError(ValueError):
    """A record shorter than its header says."""


def decode(records: Iterable[bytes]) -> list[RawEvent]:
    """Decode records in arrival order, into a list."""
    return list(iter_decode(records))


def iter_decode(records: Iterable[bytes]) -> Iterator[RawEvent]:
    """Decode records one by one in arrival (ring) order."""
    for arrival, rec in enumerate(records):
        yield decode_one(rec, arrival)


_SIZE = HEADER.size
_unpack = HEADER.unpack_from


def decode_one(rec: bytes, arrival: int) -> RawEvent:
    """Decode the `arrival`-th record of the ring."""
    if len(rec) < _SIZE:
        raise DecodeError(f"record {arrival} has {len(rec)} bytes, header needs {_SIZE}")
    ts, tgid, tid, hook, data_len, truncated, _run, ret, a0, a1, a2, a3 = _unpack(rec)
    data = rec[_SIZE : _SIZE + data_len]
    if len(data) != data_len:
        raise DecodeError(f"record {arrival} payload is {len(data)} bytes, header says {data_len}")
    return RawEvent(ts, tgid, tid, hook, ret, a0, a1, a2, a3, data, truncated, arrival)


