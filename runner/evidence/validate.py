"""Check a v0 evidence archive against the contract and Assay's rules, reporting every problem.

A problem is one line, `member: problem` (with `line N: ` for NDJSON), so a
reviewer or CI log shows all that is wrong at once, not the first failure.
Three layers of checks, each skipping what an earlier one could not parse
(an undecodable member yields its decode error, never a cascade):

1. structure: the v0 member set, and the manifest's listing, digests, sizes;
2. each member alone: strict decoding with its Struct from
   `normalizer.artifacts` (upstream's types; msgspec names the field path),
   then the rules inside that member (runner/evidence/conformance/);
3. across members: one safe run_id everywhere, and the conformance rules
   that relate members (coverage, surface, layers, bindings), then the
   fail-closed secret sweep over every member's bytes.

`validate_members` is the entry point for code (the runner checks what it is
about to write; diff/determinism check their inputs); `validate_path` reads
an archive or directory safely for the CLI. The rules, with example problem
lines, are documented in `docs/artifacts.md`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from normalizer.artifacts import (
    CapabilitySurface,
    CorrelationReport,
    Manifest,
    ObservationHealth,
    is_safe_run_id,
)
from runner.evidence.archive import MANIFEST, MEMBER_ORDER
from runner.evidence.bounded import (
    ArchiveError,
    ReadMember,
    iter_line_blocks,
    member_sha256,
    member_size,
    open_members,
)
from runner.evidence.conformance import documents, kernel, layers
from runner.evidence.conformance.base import (
    ARCHIVE,
    CORRELATION,
    HEALTH,
    KERNEL,
    SURFACE,
    Parsed,
    Problem,
)
from runner.evidence.conformance.secrets import (
    secret_problems,
    secret_problems_in_blocks,
    secret_problems_in_document,
)
from runner.evidence.docstream import DocumentError, decode_document
from runner.evidence.lines import LINE_TYPES, MAX_HELD_LINES, check_lines, locator

__all__ = ["Problem", "Report", "validate_member", "validate_members", "validate_path"]

DOCUMENT_TYPES: dict[str, type[Manifest | CapabilitySurface | CorrelationReport | ObservationHealth]] = {
    MANIFEST: Manifest,
    SURFACE: CapabilitySurface,
    CORRELATION: CorrelationReport,
    HEALTH: ObservationHealth,
}
"""JSON members: one document each."""

V0_MEMBERS = (MANIFEST, *MEMBER_ORDER)



# --- 1. structure ----------------------------------------------------------


def _structure_problems(members: Mapping[str, ReadMember]) -> Iterator[Problem]:
    for name in V0_MEMBERS:
        if name not in members:
            yield Problem(name, "missing from the archive")


def _manifest_problems(members: Mapping[str, ReadMember], manifest: Manifest | None) -> Iterator[Problem]:
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
        if entry.bytes != member_size(data):
            yield Problem(key, f"is {member_size(data)} bytes, manifest.json says {entry.bytes}")
        digest = member_sha256(data)
        if entry.sha256 != digest:
            yield Problem(key, f"digest is {digest}, manifest.json says {entry.sha256}")
    for name in sorted(members):
        if name != MANIFEST and name not in listed:
            yield Problem(name, "not listed in manifest.json")


# --- 2. each member alone ------------------------------------------------


DOCUMENT_RULES: dict[type, Callable[[Any], Iterable[str]]] = {
    ObservationHealth: documents.health_rules,
    CapabilitySurface: documents.surface_rules,
    CorrelationReport: documents.correlation_rules,
}
def _check_document(name: str, data: ReadMember, parsed: Parsed) -> Iterator[Problem]:
    """A document decoded strictly, streamed when large (docstream): the surface's lists stay
    streamed (its rules only iterate them), the other documents' are held up to a ceiling."""
    kind = DOCUMENT_TYPES[name]
    try:
        doc = decode_document(data, kind, None if name == SURFACE else MAX_HELD_LINES)
    except DocumentError as exc:
        parsed.broken.add(name)
        yield Problem(name, str(exc))
        return
    parsed.documents[name] = doc
    parsed.saw_run_id(name, None, doc.run_id)
    for message in DOCUMENT_RULES.get(kind, lambda _: ())(doc):
        yield Problem(name, message)


MAX_PROBLEMS = 1000
"""Problems listed per member and check; the rest are counted in one more line."""


def _check_member(name: str, data: ReadMember, parsed: Parsed) -> Iterator[Problem]:
    if name in DOCUMENT_TYPES:
        yield from _check_document(name, data, parsed)
    elif name in LINE_TYPES:
        yield from check_lines(name, data, parsed)
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


def _run_id_problems(parsed: Parsed) -> Iterator[Problem]:
    """One run_id everywhere (archive.rs:98-121), and a safe one (run.rs:216-220): the archive's is
    the first decoded in archive order (the manifest's, unless it did not decode)."""
    if parsed.run_id is None:
        return
    run_id, source = parsed.run_id
    if not is_safe_run_id(run_id):
        yield Problem(source, f"run_id {run_id!r} is not only ASCII letters, digits, '_' and '-'")
    yield from parsed.run_id_problems


def _cross_problems(parsed: Parsed, locate: kernel.Locate) -> Iterator[Problem]:
    """Health and surface versus the kernel layer, then the layers' bindings.

    A rule runs only when every member it reads decoded without a problem:
    otherwise a mismatch might be an artifact of the decode error already reported.
    """
    if parsed.whole(KERNEL, HEALTH):
        yield from kernel.coverage_problems(parsed.documents[HEALTH], parsed.kernel)
    if parsed.whole(KERNEL, SURFACE):
        yield from kernel.surface_problems(parsed.documents[SURFACE], parsed.kernel, locate)
    yield from layers.cross_problems(parsed)


# --- entry points ----------------------------------------------------------


def _capped(problems: Iterable[Problem]) -> Iterator[Problem]:
    """The first `MAX_PROBLEMS` problems of each member, then one line counting the rest: a member
    wrong on every one of millions of lines is reported in bounded memory."""
    listed: dict[str, int] = {}
    unlisted: dict[str, int] = {}
    for problem in problems:
        if listed.get(problem.member, 0) < MAX_PROBLEMS:
            listed[problem.member] = listed.get(problem.member, 0) + 1
            yield problem
        else:
            unlisted[problem.member] = unlisted.get(problem.member, 0) + 1
    for member, count in unlisted.items():
        yield Problem(member, f"{count} more problems not listed (at most {MAX_PROBLEMS} a member and check)")


def find_problems(members: Mapping[str, ReadMember], sweep: bool = True) -> tuple[list[Problem], Parsed]:
    """Every problem of an archive's members, and what decoded cleanly.

    `sweep=False` leaves out the secret sweep, for a caller that has just run it
    (`publish` sweeps every member first, whatever its size).
    """
    parsed = Parsed()
    problems = list(_structure_problems(members))
    known = [name for name in V0_MEMBERS if name in members]
    extra = sorted(set(members) - set(V0_MEMBERS))
    try:
        for name in (*known, *extra):
            problems += _capped(_check_member(name, members[name], parsed))
        problems += _manifest_problems(members, parsed.documents.get(MANIFEST))
        problems += _capped(_run_id_problems(parsed))
        problems += _capped(_cross_problems(parsed, locator(members.get(KERNEL, b""))))
    finally:
        if parsed.kernel is not None:
            parsed.kernel.close()
    if sweep:
        for name in (*known, *extra):
            data = members[name]
            if isinstance(data, bytes):
                problems += secret_problems(name, data)
            elif name.endswith(".ndjson"):
                problems += secret_problems_in_blocks(name, iter_line_blocks(data.chunks()))
            else:
                problems += secret_problems_in_document(name, data.chunks())
    return problems, parsed


def validate_members(members: Mapping[str, ReadMember], sweep: bool = True) -> list[str]:
    """Problem lines (`member: problem`) for an archive's members; [] if valid.

    `members` is every member by archive path, the manifest included: before
    writing, pass `{MANIFEST: build_manifest(run_id, members), **members}`.
    """
    return [str(p) for p in find_problems(members, sweep)[0]]


class Report(msgspec.Struct):
    """The result of validating one archive or directory (`--json` output)."""

    path: str
    valid: bool
    members: int
    run_id: str | None
    problems: list[Problem]


def archive_problems(path: Path) -> list[str]:
    """Everything wrong with the archive at `path`, one line each, for checkers that collect
    problems rather than stop at the first: unreadable, or invalid and why ([] when valid)."""
    try:
        report = validate_path(path)
    except (ArchiveError, OSError) as exc:
        return [f"archive unreadable: {exc}"]
    return [f"invalid archive: {p}" for p in report.problems]


def validate_path(path: Path) -> Report:
    """Validate the archive (.tar.gz) or directory at `path`.

    Raises ArchiveError when it cannot be read safely (missing, corrupt, or
    hostile: unsafe names, links, devices, oversized members). Nothing is
    ever extracted to disk.
    """
    if not path.exists():
        raise ArchiveError("no such file or directory")
    try:
        members = open_members(path)
    except OSError as exc:
        raise ArchiveError(exc.strerror or str(exc)) from exc
    except ArchiveError as exc:
        # read_archive names the path; callers name it once, so drop it here.
        raise ArchiveError(str(exc).removeprefix(f"cannot read {path}: ")) from exc
    problems, parsed = find_problems(members)
    if not path.is_dir() and members and next(iter(members)) != MANIFEST:
        problems.insert(0, Problem(ARCHIVE, "manifest.json is not the first member"))
    reference = parsed.run_id
    return Report(
        path=str(path),
        valid=not problems,
        members=len(members),
        run_id=reference[0] if reference else None,
        problems=problems,
    )
