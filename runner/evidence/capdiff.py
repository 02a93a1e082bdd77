"""Capability diff: what a new run can do that a base run could not, and back.

Why a dedicated diff rather than `diff -u` on the members: the surface lists
are sorted sets, so the meaningful change is set membership (added/removed
entries per set), and health and correlation are small records whose field
changes matter more than their bytes. Pure functions only: reading archives
and printing belong to `runner/cli/cmd_diff.py`; `runner/evidence/compare.py` reuses
`diff_surfaces` to explain a capability surface that differs between runs.

Correlation bindings are matched by `tool_call_id` only (the contract forbids
an order fallback for call-id-less runtimes), so a binding without a stable id
can never be paired by position here.
"""

from __future__ import annotations

import posixpath
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from typing import Literal, TypeVar

import msgspec

from normalizer.artifacts import Binding, CapabilitySurface, CorrelationReport, ObservationHealth
from runner.display import printable_lines
from runner.evidence.bounded import ReadMember
from runner.evidence.docstream import DocumentError, decode_document

SURFACE = "capability-surface.json"
HEALTH = "observation-health.json"
CORRELATION = "correlation-report.json"

_Document = TypeVar("_Document", bound=msgspec.Struct)

SURFACE_SETS = (
    "filesystem_paths",
    "network_endpoints",
    "process_execs",
    "mcp_tools",
    "policy_decisions",
)
HEALTH_FIELDS = (
    "platform",
    "kernel_layer",
    "ringbuf_drops",
    "policy_layer",
    "sdk_layer",
    "cgroup_correlation",
    "network_protocol_coverage",
    "network_endpoint_claim_scope",
)

FailOn = Literal["added", "removed", "any"]
MAX_HELD_ITEMS = 100_000
"""Items a correlation report's or health's list may hold here (bindings are one per tool call)."""


class CapDiffError(ValueError):
    """An input member cannot be decoded; the message names it and why."""


class SetChange(msgspec.Struct):
    """Entries only in the new run (`added`) and only in the base (`removed`)."""

    added: list[str]
    removed: list[str]

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


class FieldChange(msgspec.Struct):
    """One scalar field whose value differs between base and new."""

    field: str
    base: str | int
    new: str | int


class BindingChange(msgspec.Struct):
    """Bindings sharing a tool_call_id whose content differs."""

    tool_call_id: str
    base: list[Binding]
    new: list[Binding]


class CorrelationDiff(msgspec.Struct):
    """Status, bindings (matched by tool_call_id) and ambiguity changes."""

    status: FieldChange | None
    bindings_added: list[Binding]
    bindings_removed: list[Binding]
    bindings_changed: list[BindingChange]
    ambiguities: SetChange

    @property
    def empty(self) -> bool:
        return (self.status is None and not self.bindings_added and not self.bindings_removed
                and not self.bindings_changed and self.ambiguities.empty)


class HealthDiff(msgspec.Struct):
    """Changed health fields, and notes added/removed (notes are code-prefixed strings)."""

    fields: list[FieldChange]
    notes: SetChange

    @property
    def empty(self) -> bool:
        return not self.fields and self.notes.empty


class CapabilityDiff(msgspec.Struct):
    """The whole diff of two runs; `--json` prints exactly this.

    `added`, `removed` and `changed` summarize it for scripts (set by `diff_runs`).
    """

    base: str
    new: str
    surface: dict[str, SetChange]
    health: HealthDiff
    correlation: CorrelationDiff
    added: int = 0
    removed: int = 0
    changed: bool = False

    def summarize(self) -> CapabilityDiff:
        """Fill the summary fields from the detail; returns self."""
        self.added = sum(len(c.added) for c in self.surface.values())
        self.removed = sum(len(c.removed) for c in self.surface.values())
        self.changed = bool(self.added or self.removed) or not (
            self.health.empty and self.correlation.empty
        )
        return self

    def fails(self, fail_on: FailOn | None) -> bool:
        """True when the change named by `--fail-on` is present."""
        if fail_on == "added":
            return self.added > 0
        if fail_on == "removed":
            return self.removed > 0
        if fail_on == "any":
            return self.changed
        return False


class RunArtifacts(msgspec.Struct):
    """The three load-bearing members of one run, decoded strictly."""

    surface: CapabilitySurface
    health: ObservationHealth
    correlation: CorrelationReport


def decode_artifacts(members: dict[str, ReadMember]) -> RunArtifacts:
    """Decode the surface, health and correlation members; CapDiffError if one is unusable.

    Large members are streamed (runner/evidence/docstream.py): the surface's lists stay
    streamed, the health's and correlation's are held up to `MAX_HELD_ITEMS`."""

    def one(name: str, kind: type[_Document]) -> _Document:
        if name not in members:
            raise CapDiffError(f"no {name}")
        try:
            return decode_document(members[name], kind, None if name == SURFACE else MAX_HELD_ITEMS)
        except DocumentError as exc:
            raise CapDiffError(f"{name}: {exc}") from exc

    return RunArtifacts(
        surface=one(SURFACE, CapabilitySurface),
        health=one(HEALTH, ObservationHealth),
        correlation=one(CORRELATION, CorrelationReport),
    )


def set_change(base: Iterable[str], new: Iterable[str]) -> SetChange:
    """Sorted added/removed entries between two collections treated as sets."""
    b, n = set(base), set(new)
    return SetChange(added=sorted(n - b), removed=sorted(b - n))


def sorted_change(base: Iterable[str], new: Iterable[str]) -> SetChange:
    """`set_change` of two strictly sorted sets (a valid surface's), merged as they stream: neither
    side is held, only what changed. CapDiffError if a side is out of order."""
    added: list[str] = []
    removed: list[str] = []
    old_side, new_side = _in_order(base, "base"), _in_order(new, "new")
    b, n = next(old_side, None), next(new_side, None)
    while b is not None or n is not None:
        if n is None or (b is not None and b < n):
            removed.append(b)  # type: ignore[arg-type]  # b is not None here
            b = next(old_side, None)
        elif b is None or n < b:
            added.append(n)
            n = next(new_side, None)
        else:
            b, n = next(old_side, None), next(new_side, None)
    return SetChange(added=added, removed=removed)


def _in_order(values: Iterable[str], side: str) -> Iterator[str]:
    previous = None
    for value in values:
        if previous is not None and value <= previous:
            raise CapDiffError(f"{side} surface is not a sorted set at {value!r} "
                               "(run 'assay-runner validate')")
        yield value
        previous = value


def diff_surfaces(base: CapabilitySurface, new: CapabilitySurface) -> dict[str, SetChange]:
    """Added/removed entries for every capability-surface set, in contract order (the sets are
    sorted, as validation checks, so they are merged without being held)."""
    return {name: sorted_change(getattr(base, name), getattr(new, name)) for name in SURFACE_SETS}


def diff_health(base: ObservationHealth, new: ObservationHealth) -> HealthDiff:
    """Changed health fields (run_id and schema excluded) and note changes."""
    fields = [
        FieldChange(field=name, base=getattr(base, name), new=getattr(new, name))
        for name in HEALTH_FIELDS
        if getattr(base, name) != getattr(new, name)
    ]
    return HealthDiff(fields=fields, notes=set_change(base.notes, new.notes))


def _by_call_id(bindings: list[Binding]) -> dict[str, list[Binding]]:
    groups: dict[str, list[Binding]] = defaultdict(list)
    for binding in bindings:
        groups[binding.tool_call_id].append(binding)
    return groups


def _canonical(bindings: list[Binding]) -> list[bytes]:
    return sorted(msgspec.json.encode(b) for b in bindings)


def diff_correlation(base: CorrelationReport, new: CorrelationReport) -> CorrelationDiff:
    """Status change, bindings matched by tool_call_id, ambiguity set changes."""
    old, cur = _by_call_id(base.bindings), _by_call_id(new.bindings)
    added = [b for key in sorted(cur.keys() - old.keys()) for b in cur[key]]
    removed = [b for key in sorted(old.keys() - cur.keys()) for b in old[key]]
    changed = [
        BindingChange(tool_call_id=key, base=old[key], new=cur[key])
        for key in sorted(old.keys() & cur.keys())
        if _canonical(old[key]) != _canonical(cur[key])
    ]
    status = None if base.status == new.status else FieldChange("status", base.status, new.status)
    return CorrelationDiff(
        status=status,
        bindings_added=added,
        bindings_removed=removed,
        bindings_changed=changed,
        ambiguities=set_change(base.ambiguities, new.ambiguities),
    )


def diff_runs(base_name: str, base: RunArtifacts, new_name: str, new: RunArtifacts) -> CapabilityDiff:
    """The capability diff of two decoded runs."""
    return CapabilityDiff(
        base=base_name,
        new=new_name,
        surface=diff_surfaces(base.surface, new.surface),
        health=diff_health(base.health, new.health),
        correlation=diff_correlation(base.correlation, new.correlation),
    ).summarize()


# --- human rendering --------------------------------------------------------


def _grouped_paths(sign: str, paths: list[str]) -> list[str]:
    """Filesystem entries grouped under their directory, so long prefixes show once."""
    groups: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        parent, name = posixpath.split(path)
        groups[parent or "."].append(name or path)
    lines: list[str] = []
    for parent in sorted(groups):
        lines.append(f"    {parent.rstrip('/')}/")
        lines += [f"      {sign} {name}" for name in groups[parent]]
    return lines


def _set_lines(name: str, change: SetChange) -> list[str]:
    lines = [f"  {name}: +{len(change.added)} -{len(change.removed)}"]
    for sign, entries in (("+", change.added), ("-", change.removed)):
        if name == "filesystem_paths":
            lines += _grouped_paths(sign, entries)
        else:
            lines += [f"    {sign} {entry}" for entry in entries]
    return lines


def _note_code(note: str) -> str:
    return note.split(":", 1)[0]


def _note_lines(notes: SetChange) -> list[str]:
    """Note changes; a note whose code was replaced by one new note shows as was/now."""
    added = Counter(_note_code(n) for n in notes.added)
    removed = Counter(_note_code(n) for n in notes.removed)
    paired = {c for c in added if added[c] == 1 and removed[c] == 1}
    was = {_note_code(n): n for n in notes.removed if _note_code(n) in paired}
    lines: list[str] = []
    for note in notes.added:
        code = _note_code(note)
        if code in paired:
            lines += [f"  note {code}:", f"    was:{was[code][len(code) + 1:]}",
                      f"    now:{note[len(code) + 1:]}"]
        else:
            lines.append(f"  note + {note}")
    lines += [f"  note - {n}" for n in notes.removed if _note_code(n) not in paired]
    return lines


def _binding_text(b: Binding) -> str:
    return (f"{b.tool_call_id} (policy {b.policy_decision}, {b.kernel_event_count} kernel events, "
            f"{b.window.start}..{b.window.end})")


def render_text(diff: CapabilityDiff) -> str:
    """The human view: only what changed, filesystem entries grouped by directory."""
    lines = [f"capability diff: {diff.base} -> {diff.new}"]
    changed_sets = [(n, c) for n, c in diff.surface.items() if not c.empty]
    if changed_sets:
        lines.append("capability surface:")
        for name, change in changed_sets:
            lines += _set_lines(name, change)
    else:
        lines.append("capability surface: unchanged")
    if diff.health.empty:
        lines.append("health: unchanged")
    else:
        lines.append("health:")
        lines += [f"  {f.field}: {f.base} -> {f.new}" for f in diff.health.fields]
        lines += _note_lines(diff.health.notes)
    corr = diff.correlation
    if corr.empty:
        lines.append("correlation: unchanged")
    else:
        lines.append("correlation:")
        if corr.status is not None:
            lines.append(f"  status: {corr.status.base} -> {corr.status.new}")
        lines += [f"  binding + {_binding_text(b)}" for b in corr.bindings_added]
        lines += [f"  binding - {_binding_text(b)}" for b in corr.bindings_removed]
        for rebound in corr.bindings_changed:
            lines.append(f"  binding ~ {rebound.tool_call_id}:")
            lines += [f"      was {_binding_text(b)}" for b in rebound.base]
            lines += [f"      now {_binding_text(b)}" for b in rebound.new]
        lines += [f"  ambiguity + {a}" for a in corr.ambiguities.added]
        lines += [f"  ambiguity - {a}" for a in corr.ambiguities.removed]
    lines.append(
        f"summary: {diff.added} added, {diff.removed} removed, "
        f"{len(diff.health.fields)} health field changes, "
        f"correlation {'unchanged' if corr.empty else 'changed'}"
    )
    return printable_lines(lines)
