"""Reading what a monitor captured: our archive, or the bpftrace peer's text.

Both come down to the same shape, `Capture`: the drop counter the monitor
itself reports (never inferred), and the records as `(kind, text)` pairs for
`report.check_events`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.evidence.archive import read_archive

HEALTH_MEMBER = "observation-health.json"
KERNEL_MEMBER = "layers/kernel.ndjson"
BPFTRACE_LOST = re.compile(r"Lost (\d+) events")


@dataclass(frozen=True)
class Capture:
    """Drops as the monitor counted them, and its records."""

    drops: int
    kernel_layer: str
    records: tuple[tuple[str, str], ...]


def read_runner_archive(path: Path) -> Capture:
    """Drops and kernel records from one of our `.tar.gz` archives.

    A record's text is its `value` (the resolved path, the endpoint, the
    executable), which is what the workloads' expectations match against.
    """
    members = read_archive(path)
    health = json.loads(members[HEALTH_MEMBER])
    return Capture(
        drops=int(health["ringbuf_drops"]),
        kernel_layer=str(health["kernel_layer"]),
        records=tuple(_kernel_records(members.get(KERNEL_MEMBER, b""))),
    )


def _kernel_records(ndjson: bytes) -> Iterator[tuple[str, str]]:
    for line in ndjson.splitlines():
        if line.strip():
            event = json.loads(line)
            yield str(event["kind"]), str(event.get("value") or "")


def read_bpftrace_output(path: Path, stderr: str) -> Capture:
    """Drops and records from monitor.bt's output (`KIND PID TID RET ... VALUE`).

    bpftrace reports perf-buffer loss as "Lost N events", on stderr or in the
    output file depending on the version; both are summed.
    """
    text = path.read_text(errors="replace") if path.exists() else ""
    lost = sum(int(n) for n in BPFTRACE_LOST.findall(text + "\n" + stderr))
    records = tuple(
        (line.split(" ", 1)[0], line) for line in text.splitlines() if " " in line
    )
    return Capture(drops=lost, kernel_layer="bpftrace", records=records)
