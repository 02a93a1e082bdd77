"""What only the raw spool knows: runner-clock times, parent links, tool-call windows.

The archive is deterministic, so it carries no times, no argv, no raw
transient names (`tmp_obj_~1`, normalizer/transient.py), and numbers
processes without saying who created whom. A reviewer wants all three: which
kernel events happened inside which tool call, and the process tree with
each program's command line. The spool kept the
raw records, so both are recomputed here with the normalizer's own stages
(the same candidates, telemetry filter, tree numbering and SDK pairing the
archive was written with), never re-implemented.

The spool must belong to the archive: its evidence, in canonical order,
must have the same kinds and process numbers as the archive's kernel layer,
line for line; otherwise `SpoolMismatch` (values are not compared, because
publication may redact them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from normalizer.artifacts import KernelEvent
from normalizer.build import named_candidates
from normalizer.classify import is_telemetry
from normalizer.decode import iter_decode
from normalizer.execlog import ExecLog, exec_log
from normalizer.redact import Redactor
from normalizer.sdk import ToolCall, sdk_layer
from normalizer.tree import TreeBuilder, number_tree
from spool.format import Phase, Spool, SpoolError, read_spool


class SizedLines(Protocol):
    """The archive's kernel lines as `read_facts` walks them: counted, then iterated once
    (a list, or the archive's lines streamed: runner/review/view.py's StreamedLines)."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[KernelEvent]: ...


class SpoolMismatch(ValueError):
    """The spool cannot be read, or it is not the capture the archive was made from."""


@dataclass(frozen=True)
class SpoolFacts:
    """Runner-clock facts of one run, aligned with its archive."""

    path: str
    origin_ns: int
    """Runner-clock time all offsets are taken from: the first phase marker."""
    kernel_ts: list[int]
    """Capture time of each `layers/kernel.ndjson` line, by line index."""
    parents: dict[int, int | None]
    """Process number -> the number of the process that created it (None for the command)."""
    phases: list[Phase]
    tool_calls: list[ToolCall]
    argv: list[str]
    """The command line the runner was asked to observe (redacted like the archive's strings)."""
    execs: ExecLog
    """Every exec with its argv and result, and how each process ended (normalizer/execlog.py)."""
    transient: dict[str, str]
    """Canonical transient path (`.../tmp_obj_~1`) -> the raw name the run used (not redacted)."""
    requested: dict[str, str]
    """Kernel path of an opened file -> the string the open asked for, where it named the file
    differently (normalizer/kernelpaths.py; not redacted)."""

    def offset_ms(self, ts: int) -> float:
        """Milliseconds since the first phase marker."""
        return (ts - self.origin_ns) / 1e6


def _parents(spool: Spool) -> dict[int, int | None]:
    tree = TreeBuilder(spool.header.control_pids, spool.header.shim_pid)
    for _ in tree.attribute(iter_decode(spool.records)):
        pass
    return {p.number: (p.parent.number if p.parent else None) for p in number_tree(tree.root)}


def read_facts(path: Path, kernel: SizedLines) -> SpoolFacts:
    """Recompute the spool's facts and check that they fit `kernel` (the archive's lines)."""
    try:
        spool = read_spool(path)
        evidence, capture, _, names = named_candidates(spool)
    except (OSError, SpoolError, ValueError) as exc:
        raise SpoolMismatch(f"cannot read spool {path}: {exc}") from exc
    evidence = [c for c in evidence if not is_telemetry(c)]
    if len(evidence) != len(kernel):
        raise SpoolMismatch(f"spool {path} holds {len(evidence)} kernel events, the archive "
                            f"{len(kernel)}: it is not this archive's spool")
    for line, (c, e) in enumerate(zip(evidence, kernel, strict=True), start=1):
        if (c.kind, c.process) != (e.kind, e.pid):
            raise SpoolMismatch(f"spool {path} differs from the archive at kernel line {line} "
                                f"({c.kind} pid {c.process} vs {e.kind} pid {e.pid}): "
                                "it is not this archive's spool")
    phases = sorted(spool.phases, key=lambda p: p.ts)
    calls = sdk_layer(spool.sdk, spool.header.run_id, Redactor()).tool_calls  # ids as the archive has them
    stamps = [p.ts for p in phases] + [c.started_ts for c in calls] + [c.ts for c in evidence]
    return SpoolFacts(
        path=str(path),
        origin_ns=min(stamps, default=0),
        kernel_ts=[c.ts for c in evidence],
        parents=_parents(spool),
        phases=phases,
        tool_calls=calls,
        argv=[Redactor().redact(a) for a in spool.header.argv],
        execs=exec_log(spool),
        transient={canonical: raw for raw, canonical in names.renames().items()},
        requested=capture.requested,
    )


def spool_beside(archive: Path) -> Path | None:
    """`runs/ID.spool` for `runs/ID.tar.gz`, when it exists (where `run` writes it)."""
    name = archive.name
    stem = name[: -len(".tar.gz")] if name.endswith(".tar.gz") else archive.stem
    candidate = archive.with_name(stem + ".spool")
    return candidate if candidate.is_file() else None
