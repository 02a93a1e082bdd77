"""Compare repeated runs of one command member by member, and say what differs.

Why this exists: the determinism claim (design section 4) is that a
deterministic command gives byte-identical members, manifest included. A
bare "not identical" is useless to whoever must fix it, so every differing
member is reported with its first differing lines (bounded: a few line pairs
per member, each cut to an excerpt around the first differing column and
widened to the enclosing JSON field or set element, so a changed path shows
whole). A differing capability surface is also explained as set changes.

Every run is compared with run 1. Lines are compared by position: an inserted
kernel event shifts everything after it, so the first pair shown is where the
runs part ways, and the line counts show the insertion.

"Passing health stays strict" (contract principle 3) is checked here too: a
run passes only with kernel_layer=complete, ringbuf_drops=0 and
cgroup_correlation=clean. Pure functions: running and printing live in
`runner/cli/cmd_determinism.py`.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import zip_longest

import msgspec

from normalizer.artifacts import CapabilitySurface, ObservationHealth
from runner.display import printable_lines
from runner.evidence.archive import MANIFEST, MEMBER_ORDER
from runner.evidence.capdiff import HEALTH, SURFACE, CapDiffError, SetChange, diff_surfaces
from runner.evidence.endstate import NOT_COMPARED, state_digest

REPORT_SCHEMA = "assay.runner.determinism_report.v0"
MAX_LINE_PAIRS = 5
"""Differing line pairs shown per member and run; the total is always counted."""
CONTEXT = 40
"""Characters kept before the first differing column, before widening."""
REACH = 120
"""How far an excerpt may widen, each side, to reach a JSON delimiter."""
MAX_SET_ENTRIES = 10
"""Surface entries shown per set and side in the readable report (the JSON has all)."""
MAX_EXCERPT = 240
"""Longest whole line shown when a line exists in one run only."""
PASSING: dict[str, str | int] = {"kernel_layer": "complete", "ringbuf_drops": 0,
                                 "cgroup_correlation": "clean"}


class LinePair(msgspec.Struct):
    """One differing line: 1-based line and column, excerpts from both runs.

    An excerpt is None when that run's member has no such line.
    """

    line: int
    column: int
    base: str | None
    other: str | None


class RunDifference(msgspec.Struct):
    """How one run's member differs from run 1's (`base_run`).

    `*_lines` is None when the member is missing from that run.
    """

    run: int
    base_run: int
    base_lines: int | None
    other_lines: int | None
    differing_lines: int
    lines: list[LinePair]
    surface_changes: dict[str, SetChange] | None = None


class MemberDifference(msgspec.Struct):
    """A member that is not byte-identical across the runs."""

    member: str
    runs: list[RunDifference]


class HealthStatus(msgspec.Struct):
    """The health fields that decide whether a run passes."""

    kernel_layer: str
    ringbuf_drops: int
    cgroup_correlation: str
    passing: bool


class HealthFailure(msgspec.Struct):
    """One reason a run's health is not passing."""

    run: int
    field: str
    value: str | int | None
    expected: str | int
    message: str


class RunRecord(msgspec.Struct):
    """One run: where its archive is, its digest, exit code and health."""

    run: int
    archive: str
    archive_sha256: str
    exit_code: int
    health: HealthStatus | None
    workdir_sha256: str | None = None
    """Digest of the workdir's end state after the run (runner/evidence/endstate.py), if taken."""


class WorkdirDifference(msgspec.Struct):
    """A workdir path whose end state is not the same after every run.

    `entries` has one item per run, run 1 first: the path's entry
    (endstate.py: type, mode, content digest or link target), None where the
    run did not leave it.
    """

    path: str
    entries: list[str | None]


class DeterminismReport(msgspec.Struct):
    """`determinism-report.json`: the verdict and everything behind it."""

    schema: str
    run_id: str
    command: list[str]
    workdir: str
    runs: list[RunRecord]
    identical: bool
    exit_codes_match: bool
    health_passing: bool
    allow_unhealthy: bool
    passed: bool
    members_compared: list[str]
    differing_members: list[MemberDifference]
    health_failures: list[HealthFailure]
    workdir_compared: bool = False
    """The workdir's end states were taken after each run and compared."""
    workdir_identical: bool = True
    workdir_differences: list[WorkdirDifference] = msgspec.field(default_factory=list)
    content_not_compared: list[str] = msgspec.field(default_factory=list)
    """Workdir files compared by type and mode only (caches that record times, endstate.TIME_RECORDS)."""
    pinned_clock: list[str] = msgspec.field(default_factory=list)
    """`NAME=value` of each clock variable set for every run (runner/evidence/clock.py); empty with
    --no-pin-time."""


@dataclass(frozen=True)
class RunInput:
    """What the command gathered from one run, for `build_report`."""

    archive: str
    archive_sha256: str
    exit_code: int
    members: dict[str, bytes]


# --- member comparison ------------------------------------------------------


def member_order(names: Iterable[str]) -> list[str]:
    """Manifest first, then the v0 members in archive order, then any others sorted."""
    present = set(names)
    known = [n for n in (MANIFEST, *MEMBER_ORDER) if n in present]
    return known + sorted(present - set(known))


def _window(base: str, other: str, col: int) -> tuple[str, str]:
    """Excerpts of both lines around 0-based column `col`, widened to JSON delimiters.

    The prefix before `col` is common to both lines, so one start serves both.
    """
    start = 0
    if col > CONTEXT:
        soft = col - CONTEXT
        cut = max(base.rfind(d, max(0, soft - REACH), soft) for d in ",{[")
        start = cut + 1 if cut >= 0 else soft

    def cut_out(line: str) -> str:
        ends = [i for d in ",}]" if (i := line.find(d, col + 1, col + 1 + REACH)) >= 0]
        end = min(ends) if ends else min(len(line), col + CONTEXT)
        return ("…" if start > 0 else "") + line[start:end] + ("…" if end < len(line) else "")

    return cut_out(base), cut_out(other)


def _clip(line: str) -> str:
    """A whole line, cut at MAX_EXCERPT characters."""
    return line if len(line) <= MAX_EXCERPT else line[:MAX_EXCERPT] + "…"


def _first_column(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def diff_lines(base: bytes, other: bytes, limit: int = MAX_LINE_PAIRS) -> tuple[int, list[LinePair]]:
    """(number of differing lines, the first `limit` of them as excerpt pairs)."""
    a = base.decode("utf-8", errors="replace").splitlines()
    b = other.decode("utf-8", errors="replace").splitlines()
    count = 0
    pairs: list[LinePair] = []
    for number, (x, y) in enumerate(zip_longest(a, b), start=1):
        if x == y:
            continue
        count += 1
        if len(pairs) >= limit:
            continue
        if x is None or y is None:
            pairs.append(LinePair(number, 1, None if x is None else _clip(x),
                                  None if y is None else _clip(y)))
            continue
        col = _first_column(x, y)
        ex, ey = _window(x, y, col)
        pairs.append(LinePair(number, col + 1, ex, ey))
    if count == 0 and base != other:
        # Same lines, different bytes: line endings or the final newline.
        count = 1
        pairs.append(LinePair(len(a), 1, "(line endings differ)", "(line endings differ)"))
    return count, pairs


def _surface_changes(base: bytes, other: bytes) -> dict[str, SetChange] | None:
    """The surface difference as set changes, when both sides decode."""
    try:
        a = msgspec.json.decode(base, type=CapabilitySurface)
        b = msgspec.json.decode(other, type=CapabilitySurface)
        changes = diff_surfaces(a, b)
    except (msgspec.MsgspecError, UnicodeDecodeError, CapDiffError):
        return None
    return {name: change for name, change in changes.items() if not change.empty}


def _line_count(data: bytes | None) -> int | None:
    return None if data is None else len(data.splitlines())


def compare_runs(runs: list[dict[str, bytes]]) -> list[MemberDifference]:
    """Every member not byte-identical in all runs, each run compared with run 1."""
    base = runs[0]
    differences: list[MemberDifference] = []
    for name in member_order(n for members in runs for n in members):
        per_run: list[RunDifference] = []
        for number, members in enumerate(runs[1:], start=2):
            a, b = base.get(name), members.get(name)
            if a == b:
                continue
            count, pairs = diff_lines(a, b) if a is not None and b is not None else (0, [])
            per_run.append(RunDifference(
                run=number, base_run=1, base_lines=_line_count(a), other_lines=_line_count(b),
                differing_lines=count, lines=pairs,
                surface_changes=_surface_changes(a, b) if name == SURFACE and a and b else None,
            ))
        if per_run:
            differences.append(MemberDifference(name, per_run))
    return differences


# --- health -----------------------------------------------------------------


def check_health(run: int, members: dict[str, bytes]) -> tuple[HealthStatus | None, list[HealthFailure]]:
    """The run's deciding health fields and every reason it is not passing."""
    try:
        health = msgspec.json.decode(members[HEALTH], type=ObservationHealth)
    except (KeyError, msgspec.MsgspecError, UnicodeDecodeError) as exc:
        reason = "missing" if isinstance(exc, KeyError) else f"unreadable: {exc}"
        return None, [HealthFailure(run, HEALTH, None, "a valid member", f"run {run}: {HEALTH} {reason}")]
    failures = [
        HealthFailure(run, name, getattr(health, name), want,
                      f"run {run}: {name}={getattr(health, name)} (passing needs {want})")
        for name, want in PASSING.items()
        if getattr(health, name) != want
    ]
    status = HealthStatus(health.kernel_layer, health.ringbuf_drops, health.cgroup_correlation,
                          passing=not failures)
    return status, failures


# --- the report -------------------------------------------------------------


def compare_end_states(states: list[dict[str, str]]) -> list[WorkdirDifference]:
    """Every workdir path whose entry is not the same after every run, sorted by path."""
    paths = sorted({p for state in states for p in state})
    return [WorkdirDifference(p, [s.get(p) for s in states]) for p in paths
            if len({s.get(p) for s in states}) > 1]


def build_report(run_id: str, command: list[str], workdir: str, runs: list[RunInput],
                 allow_unhealthy: bool, end_states: list[dict[str, str]] | None = None,
                 pinned_clock: list[str] | None = None) -> DeterminismReport:
    """Compare the runs, check their health and exit codes, and give the verdict.

    `end_states`: the workdir after each run (endstate.end_state); when
    given, they must be the same too.
    """
    records: list[RunRecord] = []
    failures: list[HealthFailure] = []
    for number, run in enumerate(runs, start=1):
        status, problems = check_health(number, run.members)
        failures += problems
        records.append(RunRecord(number, run.archive, run.archive_sha256, run.exit_code, status,
                                 state_digest(end_states[number - 1]) if end_states else None))
    differing = compare_runs([r.members for r in runs])
    workdir_differences = compare_end_states(end_states) if end_states else []
    identical = not differing
    exit_codes_match = len({r.exit_code for r in runs}) == 1
    health_passing = not failures
    return DeterminismReport(
        schema=REPORT_SCHEMA,
        run_id=run_id,
        command=command,
        workdir=workdir,
        runs=records,
        identical=identical,
        exit_codes_match=exit_codes_match,
        health_passing=health_passing,
        allow_unhealthy=allow_unhealthy,
        passed=identical and exit_codes_match and (health_passing or allow_unhealthy)
        and not workdir_differences,
        members_compared=member_order(n for r in runs for n in r.members),
        differing_members=differing,
        health_failures=failures,
        workdir_compared=bool(end_states),
        workdir_identical=not workdir_differences,
        workdir_differences=workdir_differences,
        pinned_clock=pinned_clock or [],
        content_not_compared=sorted({p for s in end_states or () for p, e in s.items()
                                     if f" {NOT_COMPARED} (" in e}),
    )


def _health_text(status: HealthStatus | None) -> str:
    if status is None:
        return "health unreadable"
    if status.passing:
        return "health passing"
    return (f"health NOT passing (kernel_layer={status.kernel_layer} "
            f"ringbuf_drops={status.ringbuf_drops} cgroup_correlation={status.cgroup_correlation})")


def _member_text(diff: MemberDifference) -> list[str]:
    lines = [f"{diff.member} differs:"]
    for run in diff.runs:
        who = f"run {run.run} vs run {run.base_run}"
        if run.other_lines is None or run.base_lines is None:
            missing = run.run if run.other_lines is None else run.base_run
            lines.append(f"  {who}: missing in run {missing}")
            continue
        if run.base_lines == run.other_lines:
            counts = f"{run.differing_lines} of {run.base_lines} line(s) differ"
        else:
            counts = (f"{run.differing_lines} line(s) differ; run {run.base_run} has "
                      f"{run.base_lines} lines, run {run.run} has {run.other_lines}")
        lines.append(f"  {who}: {counts}")
        for pair in run.lines:
            lines.append(f"    line {pair.line}, column {pair.column}:")
            lines.append(f"      run {run.base_run}: {pair.base if pair.base is not None else '(no line)'}")
            lines.append(f"      run {run.run}: {pair.other if pair.other is not None else '(no line)'}")
        if run.differing_lines > len(run.lines):
            lines.append(f"    … {run.differing_lines - len(run.lines)} more differing line(s)")
        for name, change in (run.surface_changes or {}).items():
            for where, entries in ((run.run, change.added), (run.base_run, change.removed)):
                lines += [f"    {name}: only in run {where}: {e}" for e in entries[:MAX_SET_ENTRIES]]
                if len(entries) > MAX_SET_ENTRIES:
                    lines.append(f"    {name}: … {len(entries) - MAX_SET_ENTRIES} more only in run {where}")
    return lines


def _workdir_text(report: DeterminismReport) -> list[str]:
    if not report.workdir_compared:
        return []
    skipped = (f" ({len(report.content_not_compared)} time-recording cache file(s) by type and mode only: "
               + ", ".join(report.content_not_compared) + ")") if report.content_not_compared else ""
    if report.workdir_identical:
        return [f"workdir end state: identical after every run{skipped}"]
    lines = [f"workdir end state: {len(report.workdir_differences)} path(s) differ{skipped}:"]
    for diff in report.workdir_differences[:MAX_SET_ENTRIES]:
        lines.append(f"  {diff.path}")
        lines += [f"    run {n}: {entry if entry is not None else '(absent)'}"
                  for n, entry in enumerate(diff.entries, start=1)]
    if len(report.workdir_differences) > MAX_SET_ENTRIES:
        lines.append(f"  … {len(report.workdir_differences) - MAX_SET_ENTRIES} more path(s)")
    return lines


def render_text(report: DeterminismReport) -> str:
    """The readable report: runs, differing members with excerpts, health, verdict."""
    lines = [f"determinism: {len(report.runs)} runs of {shlex.join(report.command)} "
             f"(run id {report.run_id}, workdir {report.workdir})"]
    for r in report.runs:
        lines.append(f"  run {r.run}: exit {r.exit_code}, {_health_text(r.health)}, "
                     f"{r.archive_sha256[:19]}… {r.archive}")
    names = [d.member for d in report.differing_members]
    if names:
        lines.append(f"members: {len(report.members_compared)} compared, {len(names)} differ: "
                     + ", ".join(names))
    else:
        lines.append(f"members: {len(report.members_compared)} compared, all byte-identical")
    for diff in report.differing_members:
        lines += _member_text(diff)
    lines += _workdir_text(report)
    lines.append("clock pinned: " + (", ".join(report.pinned_clock) or "nothing (--no-pin-time)"))
    if report.health_failures:
        allowed = " (allowed by --allow-unhealthy)" if report.allow_unhealthy else ""
        lines.append(f"health failures{allowed}:")
        lines += [f"  {f.message}" for f in report.health_failures]
    if not report.exit_codes_match:
        lines.append("exit codes differ: " + ", ".join(f"run {r.run}: {r.exit_code}" for r in report.runs))
    reasons = [text for bad, text in (
        (not report.identical, "members differ"),
        (not report.workdir_identical, "workdir end state differs"),
        (not report.exit_codes_match, "exit codes differ"),
        (not report.health_passing and not report.allow_unhealthy, "health not passing"),
    ) if bad]
    lines.append("result: PASS" if report.passed else "result: FAIL (" + "; ".join(reasons) + ")")
    return printable_lines(lines)
