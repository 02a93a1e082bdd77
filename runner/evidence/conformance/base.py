"""What every conformance module shares: member names, a problem, the parsed archive."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

MANIFEST = "manifest.json"
HEALTH = "observation-health.json"
SURFACE = "capability-surface.json"
CORRELATION = "correlation-report.json"
EVENTS = "events.ndjson"
KERNEL = "layers/kernel.ndjson"
POLICY = "layers/policy.ndjson"
SDK = "layers/sdk.ndjson"
ARCHIVE = "archive"
"""Pseudo-member for problems of the archive file itself (member order)."""

UPSTREAM = "f919ce8628ad151b5da4f196b9f762b150a5e6d5"
"""The Assay commit every `file:line` in these modules refers to (normalizer/upstream/README.md)."""


class Problem(msgspec.Struct, frozen=True):
    """One thing wrong, located by member and (for NDJSON) 1-based line."""

    member: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{self.member}: {where}{self.message}"


@dataclass
class Parsed:
    """What decoded cleanly, for the cross-member checks."""

    documents: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    """NDJSON members held as (line number, decoded line): the small layers, up to a ceiling."""
    kernel: Any = None
    """The kernel layer, never held: what the cross checks need of it (kernel.KernelFacts)."""
    broken: set[str] = field(default_factory=set)
    """Members with at least one decode problem: cross checks that need them skip."""
    run_id: tuple[str, str] | None = None
    """(run_id, member it was taken from): the first decoded, in archive order."""
    run_id_problems: list[Problem] = field(default_factory=list)
    """Run ids that differ from `run_id`, found as the members stream by."""

    def whole(self, *members: str) -> bool:
        """Every one of `members` decoded without a problem (so a cross check is meaningful)."""
        return all(m not in self.broken and (m in self.documents or m in self.lines
                                             or (m == KERNEL and self.kernel is not None)) for m in members)

    def saw_run_id(self, member: str, line: int | None, run_id: str) -> None:
        """Note a decoded run id: the first is the archive's, any other differing one a problem."""
        if self.run_id is None:
            self.run_id = (run_id, member)
        elif run_id != self.run_id[0]:
            reference, source = self.run_id
            self.run_id_problems.append(
                Problem(member, f"run_id {run_id!r} differs from {reference!r} in {source}", line))
