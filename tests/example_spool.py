"""The recorded example spool (tests/data/example.spool), and records made to look like its run's."""

from __future__ import annotations

from pathlib import Path

from ebpf import wire
from spool.format import read_spool

EXAMPLE = read_spool(Path(__file__).resolve().parent / "data" / "example.spool")
RECORDS = list(EXAMPLE.records)
RECORDED = dict(zip(wire.HEADER_FIELDS, wire.HEADER.unpack_from(RECORDS[2]), strict=True))
RUN_TID = min({wire.HEADER.unpack_from(r)[2] for r in RECORDS} - set(EXAMPLE.header.control_pids)
              - {EXAMPLE.header.shim_pid})
"""The lowest thread id of the recorded command (neither the runner's nor the shim's)."""


def missing_opens(n: int) -> list[bytes]:
    """`n` opens of distinct missing files by one of the run's threads, as open_heavy makes them."""
    fields = {**RECORDED, "tgid": RUN_TID, "tid": RUN_TID, "hook": wire.HOOK_OPEN, "truncated": 0, "ret": -2,
              "a0": 0xFFFFFF9C, "a1": 0, "a2": 0, "a3": 0}
    out = []
    for i in range(n):
        data = b"/tmp/rec/work/missing-%08d-" % i + b"x" * 100 + b"\0"
        record = {**fields, "data_len": len(data)}
        out.append(wire.HEADER.pack(*(record[f] for f in wire.HEADER_FIELDS)) + data)
    return out
