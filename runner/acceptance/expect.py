"""A gate's expected evidence, and the check of one run against it.

Expectations are a TOML file per gate (`fixtures/acceptance/<gate>.toml`).
Every key is optional; a key that is present is checked, exactly unless its
name ends in `_include` (then the listed entries must be among the run's).
`$WORKSPACE`, `$PYTHON` and `$REPO` are replaced by the gate's workspace
copy, the interpreter and the checkout before comparing:

    [health]             policy_layer, sdk_layer, correlation (the report's status)
    [evidence]           files_written (successful write opens), files_read_include,
                         execs, endpoints, decisions (the surface's policy_decisions),
                         blocks ("file_blocked:PATH", "connect_blocked:ENDPOINT")
    [counts]             processes, kernel_events, and any kernel-line kind
                         (exec, openat, file_blocked, connect_blocked, ...)
    [probe_matrix]       the probe-matrix gate only (probe_gate.py): modes, outcomes
                         (probe -> one cell per mode), not_checked ("mode/probe")
    [[bindings]]         one per tool call, all of them (the set of ids is exact):
                         tool_call_id, tool, decision, kernel_events,
                         declared_writes: the paths the call says it writes,
                         undeclared_writes: the writes inside its window that it
                         did not declare and that the gate expects (default []:
                         a clean call). What counts as a write: WRITE_EVENTS.

`endpoints` leaves out the host's name-service sockets (HOST_NAME_SERVICES):
glibc connects to nscd or systemd-userdb by itself on any user or host
lookup (bash does one when HOME is unset), so whether they appear depends
on the machine, not on the command. A gate that lists one still checks it.

The hidden-write gate rests on the last two: its fixture's read_file call
also writes a file; with `undeclared_writes = []` the gate fails naming the
write, with the write listed it passes.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import msgspec

from normalizer.fsops import (
    CHMOD,
    CHMOD_SETID,
    FAILED,
    LINK_TO,
    MKDIR,
    MKNOD,
    RENAME_FROM,
    RENAME_TO,
    RMDIR,
    SYMLINK,
    TRUNCATE,
    UNLINK,
)
from normalizer.nsops import CHOWN, MOUNT_TARGET, MOVE_TO, UTIMES_GIVEN, UTIMES_NOW, XATTR_REMOVE, XATTR_SET
from runner.review.view import EventRef, RunView

_CHANGES = (UNLINK, RMDIR, RENAME_FROM, RENAME_TO, MKDIR, SYMLINK, LINK_TO, TRUNCATE, CHMOD,
            CHMOD_SETID, MKNOD, CHOWN, UTIMES_NOW, UTIMES_GIVEN, XATTR_SET, XATTR_REMOVE, MOUNT_TARGET,
            MOVE_TO)
WRITE_EVENTS = frozenset(f"event_{op + failed}" for op in _CHANGES for failed in (0, FAILED))
"""Kernel lines (besides write opens) that are writes to their `value` path (docs/acceptance.md).

A write is anything that changes a file's content, its mode, or a
directory's entries: an open for writing, a `file_blocked` write, and the
`event_<id>` lines of docs/artifacts.md that change the tree: unlink (120),
rmdir (121), both sides of a rename (122 old: the name leaves its
directory; 123 new: it enters or replaces one), mkdir (124), the link a
symlink makes (125, not its target text 126), a hard link's new name (128,
not the existing file 127), truncate (129), chmod (130/131), mknod (132),
chown (173), times (174/175), xattrs set or removed (176/178: the file, not
the name lines 177/179) and a mount over a path (164 mount target, 171
move_mount destination: what the directory shows changes).
As with opens, an attempt counts whatever its outcome (the +100 ids): the
gate checks what a tool call tried to write, and a denied attempt is the
same undeclared intent as a `file_blocked` write.
"""

HOST_NAME_SERVICES = ("unix:/var/run/nscd/socket", "unix:/run/nscd/socket",
                      "unix:/run/systemd/userdb/")


def _host_service(endpoint: str) -> bool:
    return any(endpoint == s or (s.endswith("/") and endpoint.startswith(s))
               for s in HOST_NAME_SERVICES)


class BindingExpectation(msgspec.Struct, forbid_unknown_fields=True):
    tool_call_id: str
    tool: str | None = None
    decision: str | None = None
    kernel_events: int | None = None
    declared_writes: list[str] = msgspec.field(default_factory=list)
    undeclared_writes: list[str] = msgspec.field(default_factory=list)


class HealthExpectation(msgspec.Struct, forbid_unknown_fields=True):
    policy_layer: str | None = None
    sdk_layer: str | None = None
    correlation: str | None = None


class EvidenceExpectation(msgspec.Struct, forbid_unknown_fields=True):
    files_written: list[str] | None = None
    files_read_include: list[str] | None = None
    execs: list[str] | None = None
    endpoints: list[str] | None = None
    decisions: list[str] | None = None
    blocks: list[str] | None = None


class ProbeMatrixExpectation(msgspec.Struct, forbid_unknown_fields=True):
    """The probe-matrix gate's expected results (runner/acceptance/probe_gate.py)."""

    modes: list[str]
    """The run modes, in the order of each `outcomes` row."""
    outcomes: dict[str, list[str]]
    """probe id -> one cell per mode: `success`, `denied:<errno>`, `error` or `partial`."""
    not_checked: list[str] = msgspec.field(default_factory=list)
    """`mode/probe` entries the kernel evidence cannot speak to (all others must agree)."""


class Expectations(msgspec.Struct, forbid_unknown_fields=True):
    description: str = ""
    health: HealthExpectation = msgspec.field(default_factory=HealthExpectation)
    evidence: EvidenceExpectation = msgspec.field(default_factory=EvidenceExpectation)
    counts: dict[str, int] = msgspec.field(default_factory=dict)
    bindings: list[BindingExpectation] | None = None
    probe_matrix: ProbeMatrixExpectation | None = None


class ExpectationError(ValueError):
    """The expectations file cannot be used (message names the file and the field)."""


def load(path: Path) -> Expectations:
    """Read and check an expectations file."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ExpectationError(f"{path}: {exc}") from exc
    try:
        exp = msgspec.convert(data, Expectations)
    except msgspec.ValidationError as exc:
        raise ExpectationError(f"{path}: {exc}") from exc
    matrix = exp.probe_matrix
    if matrix is not None:
        for probe, row in matrix.outcomes.items():
            if len(row) != len(matrix.modes):
                raise ExpectationError(f"{path}: field probe_matrix.outcomes.{probe}: {len(row)} cells, "
                                       f"expected one per mode ({len(matrix.modes)})")
    return exp


def _subst(values: list[str], subst: dict[str, str]) -> list[str]:
    out = []
    for value in values:
        for key, repl in subst.items():
            value = value.replace(key, repl)
        out.append(value)
    return sorted(set(out))


def _exact(what: str, want: list[str], got: list[str]) -> list[str]:
    problems = [f"{what}: expected {v!r}, not in the run" for v in want if v not in got]
    problems += [f"{what}: unexpected {v!r}" for v in got if v not in want]
    return problems


def is_write(e: EventRef) -> bool:
    """Whether a kernel line is a write to its path (see WRITE_EVENTS)."""
    return e.value is not None and (
        (e.kind in ("openat", "event_83") and e.access_mode in ("write", "read_write"))
        or (e.kind == "file_blocked" and e.access_mode == "write")
        or e.kind in WRITE_EVENTS)


def _writes_in(view: RunView, binding_id: str) -> list[str] | None:
    for b in view.bindings:
        if b.tool_call_id == binding_id and b.events is not None:
            return sorted({e.value for e in b.events if e.value is not None and is_write(e)})
    return None


def _binding_problems(exp: BindingExpectation, view: RunView, subst: dict[str, str]) -> list[str]:
    got = next(b for b in view.bindings if b.tool_call_id == exp.tool_call_id)
    who = f"binding {exp.tool_call_id}"
    problems = [
        f"{who}: {name} is {actual!r}, expected {want!r}"
        for name, want, actual in (("tool", exp.tool, got.tool),
                                   ("decision", exp.decision, got.policy_decision),
                                   ("kernel_events", exp.kernel_events, got.kernel_event_count))
        if want is not None and want != actual
    ]
    writes = _writes_in(view, exp.tool_call_id)
    if writes is None:
        return [*problems, f"{who}: no window: the spool is needed to check its writes"]
    undeclared = [w for w in writes if w not in _subst(exp.declared_writes, subst)]
    expected = _subst(exp.undeclared_writes, subst)
    problems += [f"{who} ({got.tool}): undeclared write {w!r} inside its window" for w in undeclared
                 if w not in expected]
    problems += [f"{who} ({got.tool}): expected undeclared write {w!r} was not seen" for w in expected
                 if w not in undeclared]
    return problems


def check(exp: Expectations, view: RunView, subst: dict[str, str]) -> list[str]:
    """Every way the run differs from the expectations (empty: as expected)."""
    problems: list[str] = []
    h = exp.health
    for name, want, actual in (("policy_layer", h.policy_layer, view.health.policy_layer),
                               ("sdk_layer", h.sdk_layer, view.health.sdk_layer),
                               ("correlation", h.correlation, view.summary.correlation)):
        if want is not None and want != actual:
            problems.append(f"health: {name} is {actual!r}, expected {want!r}")
    files = [f for d in view.directories for f in d.files]
    observed = {
        "files_written": view.summary.files_written,
        "execs": sorted({x.path for p in view.processes for x in p.execs
                         if x.result == "success" and x.path}),
        "endpoints": [e.endpoint for e in view.endpoints],
        "decisions": view.summary.policy_decisions,
        "blocks": sorted(f"{b.kind}:{b.target}" for b in view.blocks),
    }
    e = exp.evidence
    for name, got in observed.items():
        listed = getattr(e, name)
        if listed is not None:
            wanted = _subst(listed, subst)
            if name == "endpoints":
                got = [g for g in got if g in wanted or not _host_service(g)]
            problems += _exact(name, wanted, got)
    if e.files_read_include is not None:
        read = {f.path for f in files if "read" in f.access_modes or "read_write" in f.access_modes}
        problems += [f"files_read: expected {p!r}, not read in the run"
                     for p in _subst(e.files_read_include, subst) if p not in read]
    counts = Counter({"processes": len(view.processes), "kernel_events": view.summary.kernel_events,
                      **view.summary.kinds})
    problems += [f"counts: {name} is {counts[name]}, expected {want}"
                 for name, want in sorted(exp.counts.items()) if counts[name] != want]
    if exp.bindings is not None:
        problems += _exact("bindings", sorted(b.tool_call_id for b in exp.bindings),
                           sorted(b.tool_call_id for b in view.bindings))
        for b in exp.bindings:
            if any(v.tool_call_id == b.tool_call_id for v in view.bindings):
                problems += _binding_problems(b, view, subst)
    return problems
