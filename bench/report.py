"""What a workload says about itself, and checking a capture against it.

Workloads print one line `ABENCH {json}`: their own elapsed time, their
operation counts, and expectations `{kind, contains, count}`: "a capture must
hold exactly `count` records of `kind` whose text contains `contains`" (the
marker in the file names, or the port of the workload's own listener). The
same check runs over our archive and over the bpftrace peer's output, so
"every event present" means the same thing for both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

REPORT_PREFIX = "ABENCH "


@dataclass(frozen=True)
class Expectation:
    """Exactly `count` captured records of `kind` containing `contains`."""

    kind: str
    contains: str
    count: int

    @property
    def label(self) -> str:
        """Short name for tables and messages."""
        return f"{self.kind}~{self.contains}"


@dataclass(frozen=True)
class WorkloadReport:
    """A workload's report line, decoded."""

    workload: str
    elapsed_s: float
    ops: dict[str, int]
    expect: tuple[Expectation, ...]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EventCheck:
    """How many matching records a capture held against how many were made."""

    label: str
    expected: int
    seen: int

    @property
    def ok(self) -> bool:
        """Neither missing nor duplicated."""
        return self.seen == self.expected


class ReportError(ValueError):
    """The command's output holds no usable report line."""


def parse_report(stdout: str) -> WorkloadReport:
    """The last `ABENCH` line in `stdout`, decoded."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(REPORT_PREFIX)]
    if not lines:
        tail = stdout.strip()[-200:] or "(empty)"
        raise ReportError(f"no {REPORT_PREFIX.strip()} report line in the output: {tail}")
    raw = json.loads(lines[-1][len(REPORT_PREFIX):])
    known = {"workload", "elapsed_s", "ops", "expect"}
    return WorkloadReport(
        workload=raw["workload"],
        elapsed_s=float(raw["elapsed_s"]),
        ops=dict(raw["ops"]),
        expect=tuple(Expectation(**e) for e in raw["expect"]),
        extra={k: v for k, v in raw.items() if k not in known},
    )


def check_events(
    expect: Iterable[Expectation], records: Iterable[tuple[str, str]]
) -> list[EventCheck]:
    """Counts `(kind, text)` records matching each expectation, in one pass."""
    wanted = list(expect)
    seen = [0] * len(wanted)
    for kind, text in records:
        for i, e in enumerate(wanted):
            if kind == e.kind and e.contains in text:
                seen[i] += 1
    return [EventCheck(e.label, e.count, n) for e, n in zip(wanted, seen, strict=True)]
