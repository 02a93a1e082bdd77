"""One run, arranged for a reviewer: the data behind `show`, `show --json` and `report`.

Built from the archive's members, decoded through the contract's models
(normalizer/artifacts.py), and, when a spool is given, from `SpoolFacts`
(times, parent links, windows). Strings are kept exactly as recorded here;
each renderer escapes them for its medium (runner/display.py for
terminals, then HTML escaping for the report).

Without a spool, what the archive alone cannot say is left empty and
`timeline` says so: processes have no parents, bindings have the archive's
counts but not which events they hold.
"""

from __future__ import annotations

import posixpath
import shlex
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

from normalizer.artifacts import (
    RUN_ID_MAX,
    Binding,
    KernelEvent,
    ObservationHealth,
    PolicyEvent,
    RunEvent,
    SdkEvent,
    is_safe_run_id,
)
from normalizer.redact import Redactor
from normalizer.telemetry import O_TMPFILE_BIT
from normalizer.text import escape_bytes
from runner.evidence.bounded import MAX_LINE_BYTES, ReadMember, iter_lines, member_chunks
from runner.evidence.capdiff import MAX_HELD_ITEMS, decode_artifacts
from runner.evidence.compare import PASSING, check_health
from runner.review.moved import moved_processes
from runner.review.notes import meaning
from runner.review.spool_facts import SpoolFacts

VIEW_SCHEMA = "assay.runner.review.v0"
KERNEL = "layers/kernel.ndjson"
POLICY = "layers/policy.ndjson"
SDK = "layers/sdk.ndjson"
PHASES = "events.ndjson"
OPEN_KINDS = frozenset({"openat", "event_83", "event_84", "event_85"})
"""Opens: `openat`, those Assay keeps out of it (a write of a runtime path, a read through
/proc of another process; normalizer/telemetry.py), and io_uring's (normalizer/kernelpaths.py)."""
FILE_KINDS = OPEN_KINDS | {"file_blocked"}
ENDPOINT_KINDS = {"connect": "connect", "connect_blocked": "connect blocked",
                  "event_6": "datagram (sendto)", "event_7": "datagram (sendmsg)"}
BLOCK_KINDS = frozenset({"file_blocked", "connect_blocked"})
T = TypeVar("T")


class ReviewError(ValueError):
    """The archive's members cannot be read as the contract says."""


class FileEntry(msgspec.Struct):
    """One path the command opened or was refused, with how."""

    path: str
    name: str
    access_modes: list[str]
    """Access modes of its opens (read, write, read_write, unknown), sorted."""
    operation_flags: list[str]
    opens: int
    failed: int
    """Opens that returned an error (not policy blocks)."""
    blocked: list[str]
    """Accesses the policy refused (`file_blocked` lines), sorted."""
    raw_path: str | None = None
    """From the spool: for a path with a transient name (`~N`), the path the run really used; for
    a path the kernel named (`path_source=kernel`), the string an open asked for when it named the
    file differently (a symlink, an alias)."""


class TransientEntry(msgspec.Struct):
    """A transient random name: its canonical form in the archive, and the raw name from the spool."""

    canonical: str
    raw: str


class DirectoryGroup(msgspec.Struct):
    directory: str
    files: list[FileEntry]


class EndpointEntry(msgspec.Struct):
    endpoint: str
    kinds: list[str]
    events: int
    blocked: bool


class ExecEntry(msgspec.Struct):
    """One exec of a process: the program, and with a spool its argv and result."""

    path: str | None
    argv: list[str] | None
    """None where not recorded (no spool, or a spool from before argv capture)."""
    argv_complete: bool
    result: str
    """success, error (see errno) or unknown; `success` without a spool (the kernel line)."""
    errno: int | None = None


class ProcessEntry(msgspec.Struct):
    """A process of the run, numbered as in the kernel layer (the command is 1)."""

    pid: int
    parent: int | None
    children: list[int]
    execs: list[ExecEntry]
    exit: str | None
    """How it ended (`exited 0`, `signaled 9`, `unknown`), from the spool; None if not known."""
    events: int
    paths_not_host: bool = False
    """It, or a process it descends from, changed its mount namespace or root, or it changed the
    mount table (normalizer/nsops.py): its paths may not name the host's files."""


class BlockEntry(msgspec.Struct):
    """A policy block (a `file_blocked`/`connect_blocked` kernel line) and the decision behind it.

    The decision is the policy line of the tool call whose window holds the
    block (`deny:<tool>` from `assay-runner://policy/filesystem` or
    `.../network`); finding that call needs the spool's times, so without a
    spool, or for a block outside every tool call, it is None.
    """

    seq: int
    kind: str
    target: str
    access: str | None
    """The refused file access (read, write, ...); None for a connect or send."""
    return_value: int | None
    tool_call_id: str | None
    tool: str | None
    decision: str | None
    source: str | None


class NoteEntry(msgspec.Struct):
    code: str
    text: str
    meaning: str


class HealthView(msgspec.Struct):
    verdict: str
    """`passing` when kernel_layer, ringbuf_drops and cgroup_correlation are as required."""
    failures: list[str]
    kernel_layer: str
    ringbuf_drops: int
    cgroup_correlation: str
    policy_layer: str
    sdk_layer: str
    network_protocol_coverage: str
    network_endpoint_claim_scope: str
    notes: list[NoteEntry]


class EventRef(msgspec.Struct):
    """A kernel-layer line inside a tool-call window."""

    seq: int
    pid: int
    kind: str
    value: str | None
    access_mode: str | None
    status: str | None
    offset_ms: float


class BindingEntry(msgspec.Struct):
    """A tool call: the correlation report's binding, and with a spool its window."""

    tool_call_id: str
    tool: str | None
    policy_decision: str | None
    kernel_event_count: int
    start_ms: float | None
    end_ms: float | None
    events: list[EventRef] | None
    """The kernel lines inside the window (None without a spool)."""


class PhaseEntry(msgspec.Struct):
    name: str
    offset_ms: float | None


class Summary(msgspec.Struct):
    run_id: str
    platform: str
    command: list[str] | None
    kernel_events: int
    kinds: dict[str, int]
    """Kernel-layer lines per kind."""
    files: int
    files_written: list[str]
    endpoints: int
    processes: int
    blocks: int
    tool_calls: int
    correlation: str
    ambiguities: list[str]
    policy_decisions: list[str]
    duration_ms: float | None
    """The command's run length (`run_started` to `command_exited`), the one `run`'s summary gives;
    None without a spool."""


class RunView(msgspec.Struct):
    """Everything `show` and `report` display."""

    schema: str
    archive: str
    spool: str | None
    timeline: str
    """`runner clock (spool)` or why there are no times."""
    summary: Summary
    health: HealthView
    processes: list[ProcessEntry]
    directories: list[DirectoryGroup]
    endpoints: list[EndpointEntry]
    blocks: list[BlockEntry]
    bindings: list[BindingEntry]
    phases: list[PhaseEntry]
    transient_names: list[TransientEntry] = msgspec.field(default_factory=list)
    """Every transient name of the run with its raw name (needs the spool: empty without it)."""


def decode_lines(members: dict[str, ReadMember], name: str, kind: type[T]) -> list[T]:
    """The NDJSON member `name` decoded line by line, held (the small layers: at most
    `MAX_HELD_ITEMS` lines, a tool call or a phase each)."""
    lines = StreamedLines(members, name, kind)
    if len(lines) > MAX_HELD_ITEMS:
        raise ReviewError(f"{name}: {len(lines)} lines, more than the {MAX_HELD_ITEMS} shown "
                          "(run 'assay-runner validate' on it)")
    return list(lines)


class StreamedLines(Generic[T]):
    """An NDJSON member's lines, decoded again each time they are iterated: the kernel layer is
    never held, whatever its size (each use of it here is one pass; the review makes five)."""

    def __init__(self, members: dict[str, ReadMember], name: str, kind: type[T]) -> None:
        self._member, self._name, self._decoder = members.get(name, b""), name, msgspec.json.Decoder(kind)
        self._size: int | None = None

    def __len__(self) -> int:
        if self._size is None:
            self._size = sum(1 for _ in self)
        return self._size

    def __iter__(self) -> Iterator[T]:
        count = 0
        for number, line in iter_lines(member_chunks(self._member)):
            count += 1
            if line is None:
                raise ReviewError(f"{self._name}: line {number} is longer than {MAX_LINE_BYTES} bytes "
                                  "(run 'assay-runner validate' on it)")
            try:
                yield self._decoder.decode(line)
            except (msgspec.MsgspecError, UnicodeDecodeError) as exc:
                raise ReviewError(f"{self._name}: line {number}: {exc} (run 'assay-runner validate' "
                                  "on it)") from exc
        self._size = count


def _directories(kernel: Iterable[KernelEvent]) -> list[DirectoryGroup]:
    files: dict[str, FileEntry] = {}
    for e in kernel:
        if e.kind not in FILE_KINDS or e.value is None:
            continue
        entry = files.setdefault(e.value, FileEntry(e.value, posixpath.basename(e.value) or e.value,
                                                    [], [], 0, 0, []))
        access = e.access_mode if isinstance(e.access_mode, str) else "unknown"
        if e.kind == "file_blocked":
            entry.blocked = sorted({*entry.blocked, access})
            continue
        entry.opens += 1
        entry.access_modes = sorted({*entry.access_modes, access})
        if isinstance(e.operation_flags, list):
            entry.operation_flags = sorted({*entry.operation_flags, *e.operation_flags})
        if e.status == "error":
            entry.failed += 1
    groups: dict[str, list[FileEntry]] = defaultdict(list)
    for path in sorted(files):
        groups[posixpath.dirname(path) or "."].append(files[path])
    return [DirectoryGroup(d, groups[d]) for d in sorted(groups)]


def _endpoints(kernel: Iterable[KernelEvent]) -> list[EndpointEntry]:
    found: dict[str, EndpointEntry] = {}
    for e in kernel:
        if e.kind not in ENDPOINT_KINDS or e.value is None:
            continue
        entry = found.setdefault(e.value, EndpointEntry(e.value, [], 0, False))
        entry.events += 1
        entry.kinds = sorted({*entry.kinds, ENDPOINT_KINDS[e.kind]})
        entry.blocked = entry.blocked or e.kind == "connect_blocked"
    return [found[k] for k in sorted(found)]


def exec_text(x: ExecEntry) -> str:
    """One exec as a reviewer reads it (unescaped: renderers escape it).

    `argv (program)`, or the program alone without argv; a failed exec says
    so with its errno, a cut argv is marked.
    """
    path = x.path or "(unknown program)"
    text = shlex.join(x.argv) if x.argv else path
    if x.argv and x.argv[0] != path:
        text += f"  [{path}]"
    if x.argv and not x.argv_complete:
        text += "  (argv cut)"
    if x.result == "error":
        text += f"  (failed, errno {x.errno})"
    elif x.result == "unknown":
        text += "  (never returned)"
    return text


def _argv(raw: list[bytes], redactor: Redactor) -> list[str]:
    """argv as v0 text (docs/artifacts.md, "Byte encoding"), redacted as the archive's strings are.

    The spool keeps raw bytes; the v0 encoding is lossless, so every value a
    reviewer sees reads the same as it would in the archive.
    """
    return [redactor.redact(escape_bytes(a)) for a in raw]


NOT_HOST_PATHS = "paths may not be host paths (mount namespace, root or mounts changed)"
"""How show marks a process with `paths_not_host`."""
def _processes(kernel: Iterable[KernelEvent], facts: SpoolFacts | None) -> list[ProcessEntry]:
    parents: dict[int, int | None] = dict(facts.parents) if facts else {}
    execs: dict[int, list[ExecEntry]] = defaultdict(list)
    events: dict[int, int] = defaultdict(int)
    for e in kernel:
        events[e.pid] += 1
        parents.setdefault(e.pid, None)
        if facts is None and e.kind == "exec":
            execs[e.pid].append(ExecEntry(e.value, None, False, "success"))
    if facts is not None:
        redactor = Redactor()
        for x in facts.execs.execs:
            parents.setdefault(x.process, None)
            execs[x.process].append(ExecEntry(x.path, _argv(x.argv, redactor) if x.argv else None,
                                              x.argv_complete, x.result, x.errno))
    exits = {pid: f"{s.how} {s.code}" if s.code is not None else s.how
             for pid, s in facts.execs.exits.items()} if facts else {}
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in parents.items():
        if parent is not None:
            children[parent].append(pid)
    moved = moved_processes(kernel, children)
    return [ProcessEntry(pid=pid, parent=parents[pid], children=sorted(children[pid]), execs=execs[pid],
                         exit=exits.get(pid), events=events[pid], paths_not_host=pid in moved)
            for pid in sorted(parents)]


def _enclosing(facts: SpoolFacts, ts: int) -> str | None:
    """The id of the one finished tool call whose window holds `ts`, if exactly one does."""
    inside = [c.tool_call_id for c in facts.tool_calls if c.tool_call_id is not None
              and c.finished_ts is not None and c.started_ts <= ts <= c.finished_ts]
    return inside[0] if len(inside) == 1 else None


def _blocks(kernel: Iterable[KernelEvent], policy: list[PolicyEvent],
            facts: SpoolFacts | None) -> list[BlockEntry]:
    lines = {p.tool_call_id: p for p in policy}
    out = []
    for index, e in enumerate(kernel):
        if e.kind not in BLOCK_KINDS or e.value is None:
            continue
        call = _enclosing(facts, facts.kernel_ts[index]) if facts else None
        p = lines.get(call) if call else None
        out.append(BlockEntry(
            seq=e.seq, kind=e.kind, target=e.value,
            access=e.access_mode if isinstance(e.access_mode, str) else None,
            return_value=e.return_value if isinstance(e.return_value, int) else None,
            tool_call_id=call, tool=p.tool if p else None,
            decision=f"{p.decision}:{p.tool}" if p else None, source=p.source if p else None))
    return out


def _bindings(correlation_bindings: list[Binding], sdk: list[SdkEvent], kernel: Iterable[KernelEvent],
              facts: SpoolFacts | None) -> list[BindingEntry]:
    tools = {e.tool_call_id: e.tool for e in sdk
             if isinstance(e.tool_call_id, str) and isinstance(e.tool, str)}
    windows = {c.tool_call_id: c for c in facts.tool_calls} if facts else {}
    out = []
    for b in correlation_bindings:
        call = windows.get(b.tool_call_id)
        start = end = None
        events: list[EventRef] | None = None
        if facts is not None and call is not None and call.finished_ts is not None:
            start, end = facts.offset_ms(call.started_ts), facts.offset_ms(call.finished_ts)
            events = [
                EventRef(e.seq, e.pid, e.kind, e.value,
                         e.access_mode if isinstance(e.access_mode, str) else None,
                         e.status if isinstance(e.status, str) else None, facts.offset_ms(ts))
                for e, ts in zip(kernel, facts.kernel_ts, strict=True)
                if call.started_ts <= ts <= call.finished_ts
            ]
        out.append(BindingEntry(b.tool_call_id, tools.get(b.tool_call_id), b.policy_decision,
                                b.kernel_event_count, start, end, events))
    return out


def _health(members: dict[str, bytes], health: ObservationHealth) -> HealthView:
    _, failures = check_health(1, members)
    return HealthView(
        verdict="passing" if not failures else "not passing",
        failures=[f"{f.field}={f.value} (passing needs {f.expected})" for f in failures],
        kernel_layer=health.kernel_layer, ringbuf_drops=health.ringbuf_drops,
        cgroup_correlation=health.cgroup_correlation, policy_layer=health.policy_layer,
        sdk_layer=health.sdk_layer, network_protocol_coverage=health.network_protocol_coverage,
        network_endpoint_claim_scope=health.network_endpoint_claim_scope,
        notes=[NoteEntry(n.split(":", 1)[0], n, meaning(n)) for n in health.notes],
    )


def _transient(directories: list[DirectoryGroup], facts: SpoolFacts | None) -> list[TransientEntry]:
    """The raw names behind the archive's `~N` names, redacted as the archive's strings are.

    Each file entry below a transient name gets its raw path too (the longest
    transient prefix of its path replaced by the raw one); a file the kernel
    named gets the string an open asked for instead, where it differs.
    """
    if facts is None:
        return []
    redactor = Redactor()
    raw = {redactor.redact(c): redactor.redact(r) for c, r in facts.transient.items()}
    requested = {redactor.redact(k): redactor.redact(r) for k, r in facts.requested.items()}
    for group in directories:
        for f in group.files:
            path = f.path
            while path not in raw and path not in ("", "/"):
                path = posixpath.dirname(path)
            if path in raw:
                f.raw_path = raw[path] + f.path[len(path):]
            elif f.path in requested:  # named by the kernel: the string the open asked for
                f.raw_path = requested[f.path]
    return [TransientEntry(c, r) for c, r in sorted(raw.items())]


def build_view(archive: Path, members: dict[str, ReadMember], facts: SpoolFacts | None) -> RunView:
    """Arrange one run for review; ReviewError when a member does not decode."""
    documents = {name: m for name, m in members.items() if isinstance(m, bytes)}  # not streamed
    try:
        art = decode_artifacts(members)
    except ValueError as exc:
        raise ReviewError(f"{exc} (run 'assay-runner validate' on it)") from exc
    if len(art.surface.policy_decisions) > MAX_HELD_ITEMS:
        raise ReviewError(f"capability-surface.json: {len(art.surface.policy_decisions)} policy_decisions, "
                          f"more than the {MAX_HELD_ITEMS} shown (run 'assay-runner validate' on it)")
    if not is_safe_run_id(art.health.run_id) or len(art.health.run_id) > RUN_ID_MAX:
        raise ReviewError(f"run id {art.health.run_id!r} is not one Assay accepts "
                          "(run 'assay-runner validate' on it)")
    kernel = StreamedLines(members, KERNEL, KernelEvent)
    policy = decode_lines(members, POLICY, PolicyEvent)
    sdk = decode_lines(members, SDK, SdkEvent)
    run_events = decode_lines(members, PHASES, RunEvent)
    directories = _directories(kernel)
    processes = _processes(kernel, facts)
    blocks = _blocks(kernel, policy, facts)
    if facts is not None:
        phases = [PhaseEntry(p.name, facts.offset_ms(p.ts)) for p in facts.phases]
    else:
        phases = [PhaseEntry(e.type, None) for e in run_events]
    kinds: Counter[str] = Counter()
    written_set: set[str] = set()
    for e in kernel:
        kinds[e.kind] += 1
        if e.kind in OPEN_KINDS and e.value is not None and e.status != "error" \
                and e.access_mode in ("write", "read_write") \
                and not (isinstance(e.flags, int) and e.flags & O_TMPFILE_BIT):  # as the summary
            written_set.add(e.value)
    written = sorted(written_set)
    at = {p.name: p.offset_ms for p in phases if p.offset_ms is not None}
    summary = Summary(
        run_id=art.health.run_id, platform=art.health.platform,
        command=facts.argv if facts else None, kernel_events=len(kernel),
        kinds=dict(sorted(kinds.items())),
        files=sum(len(d.files) for d in directories), files_written=written,
        endpoints=len(art.surface.network_endpoints), processes=len(processes), blocks=len(blocks),
        tool_calls=len(art.correlation.bindings), correlation=art.correlation.status,
        ambiguities=list(art.correlation.ambiguities),
        policy_decisions=list(art.surface.policy_decisions),
        duration_ms=at["command_exited"] - at["run_started"] if {"run_started", "command_exited"} <= at.keys()
        else None,
    )
    return RunView(
        schema=VIEW_SCHEMA, archive=str(archive), spool=facts.path if facts else None,
        timeline="runner clock (spool)" if facts else "no spool: phases in archive order, no times",
        summary=summary, health=_health(documents, art.health), processes=processes,
        directories=directories, endpoints=_endpoints(kernel), blocks=blocks,
        bindings=_bindings(art.correlation.bindings, sdk, kernel, facts), phases=phases,
        transient_names=_transient(directories, facts),
    )


PASSING_RULE = ", ".join(f"{k}={v}" for k, v in PASSING.items())
"""The health rule `verdict` applies, for renderers to state."""
