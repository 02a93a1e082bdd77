"""Check a v0 evidence archive against the contract, reporting every problem.

A problem is one line, `member: problem` (with `line N: ` for NDJSON), so a
reviewer or CI log shows all that is wrong at once, not the first failure.
Three layers of checks, each skipping what an earlier one could not parse
(an undecodable member yields its decode error, never a cascade):

1. structure: the v0 member set, and the manifest's listing, digests, sizes;
2. each member alone: strict decoding with its Struct from
   `normalizer.artifacts` (msgspec names the field path), then the
   contract's rules inside that member (seq order, kind/event_type pairs,
   open metadata, sorted sets, health and correlation rules);
3. across members: one run_id everywhere, network coverage versus kernel
   lines, and the capability surface covering the kernel evidence.

`validate_members` is the entry point for code (the runner checks what it is
about to write; diff/determinism check their inputs); `validate_path` reads
an archive or directory safely for the CLI. The rules, with example problem
lines, are documented in `docs/artifacts.md`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

import msgspec

from normalizer.artifacts import (
    CapabilitySurface,
    CorrelationReport,
    KernelEvent,
    Manifest,
    ObservationHealth,
    PhaseEvent,
    RunId,
)
from runner.evidence.archive import MANIFEST, MEMBER_ORDER, ArchiveError, load_members, sha256_ref

HEALTH = "observation-health.json"
SURFACE = "capability-surface.json"
CORRELATION = "correlation-report.json"
PHASES = "events.ndjson"
KERNEL = "layers/kernel.ndjson"
POLICY = "layers/policy.ndjson"
SDK = "layers/sdk.ndjson"
ARCHIVE = "archive"
"""Pseudo-member for problems of the archive file itself (member order)."""

# The contract's tables, restated here on purpose rather than imported from
# the normalizer: the validator is the independent check of its output.
KIND_BY_EVENT_TYPE = {
    1: "openat",
    2: "connect",
    4: "exec",
    10: "file_blocked",
    20: "connect_blocked",
}
ACCESS_MODE_BY_ACCMODE = ("read", "write", "read_write", "unknown")
CONNECT_KINDS = frozenset({"connect", "connect_blocked"})
DATAGRAM_KINDS = frozenset({"event_6", "event_7"})
SURFACE_SOURCES: dict[str, frozenset[str]] = {
    "filesystem_paths": frozenset({"openat", "file_blocked"}),
    "network_endpoints": CONNECT_KINDS,
    "process_execs": frozenset({"exec"}),
}
"""Surface set -> kernel kinds whose non-null values it must contain."""


# --- Policy and SDK lines -------------------------------------------------
# The contract does not define these lines yet, and normalizer.artifacts has
# no Structs for them. Until it does, only the envelope is checked: a JSON
# object with the layer's schema string and the archive's run_id (other
# fields are allowed). Replace these two with the real Structs in LINE_TYPES.
# The literals equal POLICY_EVENT_SCHEMA / SDK_EVENT_SCHEMA (a test checks).


class PolicyEventEnvelope(msgspec.Struct):
    """Placeholder for `PolicyEvent`: the fields every policy line must have."""

    schema: Literal["assay.runner.policy_event.v0"]
    run_id: RunId


class SdkEventEnvelope(msgspec.Struct):
    """Placeholder for `SdkEvent`: the fields every SDK line must have."""

    schema: Literal["assay.runner.sdk_event.v0"]
    run_id: RunId


DOCUMENT_TYPES: dict[str, type[msgspec.Struct]] = {
    MANIFEST: Manifest,
    SURFACE: CapabilitySurface,
    CORRELATION: CorrelationReport,
    HEALTH: ObservationHealth,
}
"""JSON members: one document each."""

LINE_TYPES: dict[str, type[msgspec.Struct]] = {
    PHASES: PhaseEvent,
    KERNEL: KernelEvent,
    POLICY: PolicyEventEnvelope,
    SDK: SdkEventEnvelope,
}
"""NDJSON members: every non-empty line decodes independently as this type."""

V0_MEMBERS = (MANIFEST, *MEMBER_ORDER)


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
    broken: set[str] = field(default_factory=set)
    """Members with at least one decode problem: cross checks skip them."""


_decoders: dict[type, msgspec.json.Decoder[Any]] = {
    t: msgspec.json.Decoder(t) for t in (*DOCUMENT_TYPES.values(), *LINE_TYPES.values())
}


# --- 1. structure ----------------------------------------------------------


def _structure_problems(members: dict[str, bytes]) -> Iterator[Problem]:
    for name in V0_MEMBERS:
        if name not in members:
            yield Problem(name, "missing from the archive")


def _manifest_problems(members: dict[str, bytes], manifest: Manifest | None) -> Iterator[Problem]:
    if manifest is None:
        return
    listed = manifest.files
    if list(listed) != sorted(listed):
        yield Problem(MANIFEST, "files are not sorted by path")
    for key, entry in listed.items():
        if entry.path != key:
            yield Problem(MANIFEST, f"files[{key!r}].path is {entry.path!r}, expected {key!r}")
        if key == MANIFEST:
            yield Problem(MANIFEST, "lists itself")
            continue
        data = members.get(key)
        if data is None:
            if key not in V0_MEMBERS:  # a missing v0 member is already reported
                yield Problem(MANIFEST, f"lists {key!r}, which is not in the archive")
            continue
        if entry.bytes != len(data):
            yield Problem(key, f"is {len(data)} bytes, manifest.json says {entry.bytes}")
        digest = sha256_ref(data)
        if entry.sha256 != digest:
            yield Problem(key, f"digest is {digest}, manifest.json says {entry.sha256}")
    for name in sorted(members):
        if name != MANIFEST and name not in listed:
            yield Problem(name, "not listed in manifest.json")


# --- 2. each member alone ------------------------------------------------


def _sorted_set_problem(values: list[str]) -> str | None:
    """Why `values` is not a sorted set (code point order), or None."""
    for prev, cur in pairwise(values):
        if cur == prev:
            return f"has duplicate {cur!r}"
        if cur < prev:
            return f"is not sorted: {cur!r} after {prev!r}"
    return None


def _health_rules(h: ObservationHealth) -> Iterator[str]:
    if h.ringbuf_drops > 0 and h.kernel_layer != "partial_ringbuf_drops":
        yield (
            f"ringbuf_drops {h.ringbuf_drops} requires kernel_layer "
            f"'partial_ringbuf_drops' (got {h.kernel_layer!r})"
        )
    if h.kernel_layer == "partial_ringbuf_drops" and h.ringbuf_drops == 0:
        yield "kernel_layer 'partial_ringbuf_drops' requires ringbuf_drops > 0 (got 0)"
    if h.platform != "linux" and h.kernel_layer != "absent":
        yield f"platform {h.platform!r} requires kernel_layer 'absent' (got {h.kernel_layer!r})"
    required_scope = {"absent": "not_applicable", "unknown": "unknown"}.get(
        h.network_protocol_coverage
    )
    if required_scope and h.network_endpoint_claim_scope != required_scope:
        yield (
            f"network_protocol_coverage {h.network_protocol_coverage!r} requires "
            f"network_endpoint_claim_scope {required_scope!r} "
            f"(got {h.network_endpoint_claim_scope!r})"
        )


def _surface_rules(s: CapabilitySurface) -> Iterator[str]:
    for name in (
        "filesystem_paths",
        "network_endpoints",
        "process_execs",
        "mcp_tools",
        "policy_decisions",
    ):
        problem = _sorted_set_problem(getattr(s, name))
        if problem:
            yield f"{name} {problem}"


def _correlation_rules(c: CorrelationReport) -> Iterator[str]:
    if c.status == "clean" and c.ambiguities:
        yield f"status 'clean' requires no ambiguities (got {len(c.ambiguities)})"


def _kernel_line_rules(e: KernelEvent) -> Iterator[str]:
    expected = KIND_BY_EVENT_TYPE.get(e.event_type, f"event_{e.event_type}")
    if e.kind != expected:
        yield f"kind {e.kind!r} does not match event_type {e.event_type} (expected {expected!r})"
    if e.flags is not msgspec.UNSET and e.access_mode is not msgspec.UNSET:
        derived = ACCESS_MODE_BY_ACCMODE[e.flags & 3]
        if e.access_mode != derived:
            yield (
                f"access_mode {e.access_mode!r} does not match flags {e.flags} "
                f"(flags & 3 = {e.flags & 3}: expected {derived!r})"
            )
    if e.return_value is not msgspec.UNSET and e.status is not msgspec.UNSET:
        derived = "success" if e.return_value >= 0 else "error"
        if e.status != derived:
            yield (
                f"status {e.status!r} does not match return_value {e.return_value} "
                f"(expected {derived!r})"
            )
    if e.operation_flags is not msgspec.UNSET:
        problem = _sorted_set_problem(e.operation_flags)
        if problem:
            yield f"operation_flags {problem}"


DOCUMENT_RULES: dict[type, Callable[[Any], Iterable[str]]] = {
    ObservationHealth: _health_rules,
    CapabilitySurface: _surface_rules,
    CorrelationReport: _correlation_rules,
}
LINE_RULES: dict[type, Callable[[Any], Iterable[str]]] = {KernelEvent: _kernel_line_rules}
SEQUENCED_LINES = frozenset({KernelEvent, PhaseEvent})
"""Line types whose `seq` must be 0..n-1 in line order."""


def _decode_error(exc: msgspec.MsgspecError) -> str:
    return str(exc) or type(exc).__name__


def _check_document(name: str, data: bytes, parsed: Parsed) -> Iterator[Problem]:
    kind = DOCUMENT_TYPES[name]
    try:
        doc = _decoders[kind].decode(data)
    except msgspec.MsgspecError as exc:
        parsed.broken.add(name)
        yield Problem(name, _decode_error(exc))
        return
    parsed.documents[name] = doc
    for message in DOCUMENT_RULES.get(kind, lambda _: ())(doc):
        yield Problem(name, message)


def _check_lines(name: str, data: bytes, parsed: Parsed) -> Iterator[Problem]:
    kind = LINE_TYPES[name]
    rules = LINE_RULES.get(kind, lambda _: ())
    decoded: list[tuple[int, Any]] = []
    offset = 0  # seq minus position on the previous decoded line
    position = -1
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        position += 1
        try:
            item = _decoders[kind].decode(raw)
        except msgspec.MsgspecError as exc:
            parsed.broken.add(name)
            yield Problem(name, _decode_error(exc), number)
            continue
        if kind in SEQUENCED_LINES:
            # A missing, extra or renumbered line shifts every later seq by the
            # same amount: report the shift once, where it starts.
            if item.seq != position and item.seq - position != offset:
                yield Problem(name, f"seq is {item.seq}, expected {position}", number)
            offset = item.seq - position
        for message in rules(item):
            yield Problem(name, message, number)
        decoded.append((number, item))
    parsed.lines[name] = decoded


def _check_member(name: str, data: bytes, parsed: Parsed) -> Iterator[Problem]:
    if name in DOCUMENT_TYPES:
        yield from _check_document(name, data, parsed)
    elif name in LINE_TYPES:
        yield from _check_lines(name, data, parsed)
    else:
        yield Problem(name, "not a v0 archive member")


def validate_member(name: str, data: bytes) -> list[str]:
    """Problems of one member on its own (decoding and in-member rules).

    For checking a single artifact outside an archive, e.g. a golden file;
    archive-wide rules (manifest, shared run_id, cross-member consistency)
    need `validate_members`.
    """
    return [str(p) for p in _check_member(name, data, Parsed())]


# --- 3. across members -----------------------------------------------------


def _run_ids(parsed: Parsed) -> Iterator[tuple[str, int | None, str]]:
    """(member, line, run_id) of everything that decoded, in archive order."""
    for name in V0_MEMBERS:
        if name in parsed.documents:
            yield name, None, parsed.documents[name].run_id
        for number, item in parsed.lines.get(name, ()):
            yield name, number, item.run_id


def archive_run_id(parsed: Parsed) -> tuple[str, str] | None:
    """(run_id, member it was taken from): the manifest's, else the first found."""
    first = next(_run_ids(parsed), None)
    return (first[2], first[0]) if first else None


def _run_id_problems(parsed: Parsed) -> Iterator[Problem]:
    reference = archive_run_id(parsed)
    if reference is None:
        return
    run_id, source = reference
    for member, line, value in _run_ids(parsed):
        if value != run_id:
            yield Problem(member, f"run_id {value!r} differs from {run_id!r} in {source}", line)


def _coverage_problems(
    health: ObservationHealth, kernel: list[tuple[int, Any]]
) -> Iterator[Problem]:
    """A claimed coverage must be exactly what the kernel lines show.

    `unknown` is exempt: it says the lines may be incomplete (a network hook
    dropped records), so they can neither confirm nor refute it.
    """
    connects = sum(1 for _, e in kernel if e.kind in CONNECT_KINDS)
    datagrams = sum(1 for _, e in kernel if e.kind in DATAGRAM_KINDS)
    derived = {
        (False, False): "absent",
        (True, False): "connect_only",
        (False, True): "datagram_peer_observed",
        (True, True): "connect_and_datagram_peer_observed",
    }[(connects > 0, datagrams > 0)]
    claimed = health.network_protocol_coverage
    if claimed not in ("unknown", derived):
        yield Problem(
            HEALTH,
            f"network_protocol_coverage {claimed!r} does not match {KERNEL} "
            f"({connects} connect/connect_blocked, {datagrams} event_6/event_7 lines: "
            f"expected {derived!r})",
        )


def _surface_coverage_problems(
    surface: CapabilitySurface, kernel: list[tuple[int, Any]]
) -> Iterator[Problem]:
    """The surface holds at least every non-null value the kernel layer shows.

    Extra values are allowed: the rule bounds the surface from below only.
    """
    for set_name, kinds in SURFACE_SOURCES.items():
        present = set(getattr(surface, set_name))
        for number, e in kernel:
            if e.kind in kinds and e.value is not None and e.value not in present:
                present.add(e.value)  # report each missing value once
                yield Problem(
                    SURFACE, f"{set_name} lacks {e.value!r} ({e.kind} at {KERNEL} line {number})"
                )


def _cross_problems(parsed: Parsed) -> Iterator[Problem]:
    """Health and surface versus the kernel layer, if every kernel line decoded.

    With a line missing from the comparison, a coverage or surface problem
    might be an artifact of the decode error already reported.
    """
    if KERNEL in parsed.broken or KERNEL not in parsed.lines:
        return
    kernel = parsed.lines[KERNEL]
    if HEALTH in parsed.documents:
        yield from _coverage_problems(parsed.documents[HEALTH], kernel)
    if SURFACE in parsed.documents:
        yield from _surface_coverage_problems(parsed.documents[SURFACE], kernel)


# --- entry points ----------------------------------------------------------


def find_problems(members: dict[str, bytes]) -> tuple[list[Problem], Parsed]:
    """Every problem of an archive's members, and what decoded cleanly."""
    parsed = Parsed()
    problems = list(_structure_problems(members))
    known = [name for name in V0_MEMBERS if name in members]
    extra = sorted(set(members) - set(V0_MEMBERS))
    for name in (*known, *extra):
        problems += _check_member(name, members[name], parsed)
    problems += _manifest_problems(members, parsed.documents.get(MANIFEST))
    problems += _run_id_problems(parsed)
    problems += _cross_problems(parsed)
    return problems, parsed


def validate_members(members: dict[str, bytes]) -> list[str]:
    """Problem lines (`member: problem`) for an archive's members; [] if valid.

    `members` is every member by archive path, the manifest included: before
    writing, pass `{MANIFEST: build_manifest(run_id, members), **members}`.
    """
    return [str(p) for p in find_problems(members)[0]]


class Report(msgspec.Struct):
    """The result of validating one archive or directory (`--json` output)."""

    path: str
    valid: bool
    members: int
    run_id: str | None
    problems: list[Problem]


def validate_path(path: Path) -> Report:
    """Validate the archive (.tar.gz) or directory at `path`.

    Raises ArchiveError when it cannot be read safely (missing, corrupt, or
    hostile: unsafe names, links, devices, oversized members). Nothing is
    ever extracted to disk.
    """
    if not path.exists():
        raise ArchiveError("no such file or directory")
    try:
        members = load_members(path)
    except OSError as exc:
        raise ArchiveError(exc.strerror or str(exc)) from exc
    except ArchiveError as exc:
        # read_archive names the path; callers name it once, so drop it here.
        raise ArchiveError(str(exc).removeprefix(f"cannot read {path}: ")) from exc
    problems, parsed = find_problems(members)
    if not path.is_dir() and members and next(iter(members)) != MANIFEST:
        problems.insert(0, Problem(ARCHIVE, "manifest.json is not the first member"))
    reference = archive_run_id(parsed)
    return Report(
        path=str(path),
        valid=not problems,
        members=len(members),
        run_id=reference[0] if reference else None,
        problems=problems,
    )
