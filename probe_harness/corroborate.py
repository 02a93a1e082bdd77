"""Corroborate probe records with the kernel layer of the run they ran in.

A probe reports its own outcome; the runner's kernel layer says what the
kernel saw. Each record is joined with the kernel lines whose `value` is the
record's target (probes use unique targets, so one runner run can hold a
whole batch; a target the normalizer recorded as a transient random name,
`dir/name-12~1`, still joins) and judged by the rule of its verb:

| verb | success needs | denied needs |
|---|---|---|
| write, create | a successful write open of the target | a `file_blocked` line or a failed open of it |
| read, list | a successful open of the target | a `file_blocked` line or a failed open of it |
| exec | an `exec` line of the target | an `event_101` (failed exec) line, or a blocked create |
| spawn | at least `args.children` `exec` lines | a failed exec (`event_101`) of the program |
| connect | a `connect` line (`unix:PATH` for a path) | a `connect_blocked` line; unix: no `connect` line |
| send | an `event_6`/`event_7` datagram line | a `connect_blocked` line |

A success must also show no blocked line for its target, and a denial no
successful one. When the failing step is a syscall the kernel layer does not
trace (`symlink`, `bind`: `payload.raw.op.step`), a denial is judged on the
absence of success and the entry says so (`basis: absence`). `partial` and
`error` records are `not_checked`: they are not sandbox decisions. So is a
successful open of a path the contract classes as telemetry (`/proc`, `/sys`,
`/dev`, loader paths: `normalizer.telemetry`): the kernel layer drops those
by contract, so there is nothing to join (their denials are kept and checked).

Kernel lines are read generically (`kind`, `value`, `access_mode` or else
`flags & 3`, `status`, `return_value`) so that shape changes elsewhere in a
line do not break this.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from normalizer.telemetry import is_telemetry_path
from normalizer.transient import PLACEHOLDER, random_span
from runner.evidence.archive import ArchiveError, read_archive

KERNEL_MEMBER = "layers/kernel.ndjson"
REPORT_SCHEMA = "assay.probe.corroboration.v1"
UNTRACED_STEPS = frozenset({"symlink", "bind"})
EXEC_FAILED = "event_101"  # a failed execve/execveat, with the path it asked for
WRITE_VERBS = frozenset({"write", "create"})
READ_VERBS = frozenset({"read", "list"})


class CorroborationError(ValueError):
    """A run's archive cannot be read; the message names it."""


def kernel_lines(archive: Path) -> list[dict[str, Any]]:
    """The kernel layer's lines, each with its 1-based line number as `_line`."""
    try:
        data = read_archive(archive).get(KERNEL_MEMBER, b"")
    except ArchiveError as exc:
        raise CorroborationError(f"cannot read the kernel layer of {archive}: {exc}") from None
    out = []
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict):
            out.append({**line, "_line": number})
    return out


def _failed(line: dict[str, Any]) -> bool:
    rv = line.get("return_value")
    return line.get("status") == "error" or (isinstance(rv, int) and rv < 0)


def _access(line: dict[str, Any]) -> str | None:
    """The line's access mode, or the one its open flags imply (flags & 3) when it has none."""
    if line.get("access_mode") is not None:
        return line["access_mode"]
    flags = line.get("flags")
    return ("read", "write", "read_write", "unknown")[flags & 3] if isinstance(flags, int) else None


def _classify(line: dict[str, Any], verb: str) -> str | None:
    """'success', 'blocked' or None (irrelevant) for one line already matched on value."""
    kind = line.get("kind", "")
    if verb in WRITE_VERBS | READ_VERBS or verb == "exec":
        if kind == "file_blocked":
            return "blocked"
        if kind == "openat":
            if _failed(line):
                return "blocked" if line.get("return_value") in (-1, -13, -30, None) else None
            if verb in WRITE_VERBS:
                return "success" if _access(line) in ("write", "read_write") else None
            return "success" if verb in READ_VERBS else None
        if verb == "exec":
            return {"exec": "success", EXEC_FAILED: "blocked"}.get(kind)
        return None
    if verb == "spawn":
        return {"exec": "success", EXEC_FAILED: "blocked"}.get(kind)
    if verb == "connect":
        return {"connect": "success", "connect_blocked": "blocked"}.get(kind)
    if verb == "send":
        return {"event_6": "success", "event_7": "success", "connect_blocked": "blocked"}.get(kind)
    return None


def _kernel_value(record: dict[str, Any]) -> str:
    op = record["operation"]
    unix = op["target"].startswith("/") or (op.get("args") or {}).get("family") == "unix"
    if op["verb"] == "connect" and unix:  # a socket too long for sun_path is connected to by a relative name
        return "unix:" + op["target"]
    return op["target"]


def value_pattern(target: str) -> re.Pattern[str]:
    """What the kernel layer may write for `target`: itself, or, when the normalizer recorded
    it as a transient random name (created and gone by the end: `normalizer.transient`),
    itself with the random part replaced by `~N`. Probes create and remove such names."""
    span = random_span(target)
    if span is None:
        return re.compile(re.escape(target))
    start, end = span
    canonical = f"{re.escape(target[:start])}{re.escape(PLACEHOLDER)}[0-9]+{re.escape(target[end:])}"
    return re.compile(f"{re.escape(target)}|{canonical}")


def judge(record: dict[str, Any], lines: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One report entry: the verdict for `record` against the kernel lines of its run."""
    op, status = record["operation"], record["result"]["observed_result"]
    verb, value = op["verb"], _kernel_value(record)
    op_detail = record["payload"]["raw"].get("op")
    step = op_detail.get("step") if isinstance(op_detail, dict) else None
    seen: dict[str, list[Any]] = {"success": [], "blocked": []}
    matches = value_pattern(value).fullmatch
    for line in lines:
        if isinstance(line.get("value"), str) and matches(line["value"]):
            cls = _classify(line, verb)
            if cls:
                seen[cls].append(line["_line"])
    entry = {
        "probe": record["probe"]["id"],
        "mode": record["run"]["mode"],
        "verb": verb,
        "target": value,
        "observed_result": status,
        "kernel_success_lines": seen["success"],
        "kernel_blocked_lines": seen["blocked"],
    }
    if status not in ("success", "denied"):
        return {
            **entry,
            "verdict": "not_checked",
            "basis": None,
            "reason": f"{status} is not a sandbox decision",
        }
    if verb not in WRITE_VERBS | READ_VERBS | {"exec", "spawn", "connect", "send"}:
        return {
            **entry,
            "verdict": "not_checked",
            "basis": None,
            "reason": f"no kernel rule for verb {verb!r}",
        }
    if status == "success" and verb in WRITE_VERBS | READ_VERBS and is_telemetry_path(value):
        if seen["blocked"]:
            return {
                **entry,
                "verdict": "disagree",
                "basis": "line",
                "reason": f"record says success, kernel blocked it (line {seen['blocked'][0]})",
            }
        return {
            **entry,
            "verdict": "not_checked",
            "basis": None,
            "reason": "successful opens of this path are telemetry by contract, not in the kernel layer",
        }
    if status == "success":
        needed = int(op["args"].get("children", 1)) if verb == "spawn" else 1
        if len(seen["success"]) >= needed and not seen["blocked"]:
            return {**entry, "verdict": "agree", "basis": "line", "reason": None}
        why = (
            f"kernel blocked it (line {seen['blocked'][0]})"
            if seen["blocked"]
            else f"kernel shows {len(seen['success'])} success line(s), expected {needed}"
        )
        return {**entry, "verdict": "disagree", "basis": "line", "reason": f"record says success, {why}"}
    if seen["success"]:
        return {
            **entry,
            "verdict": "disagree",
            "basis": "line",
            "reason": f"record says denied, kernel shows success (line {seen['success'][0]})",
        }
    unix = verb == "connect" and value.startswith("unix:")
    absence_ok = step in UNTRACED_STEPS or unix
    if seen["blocked"]:
        return {**entry, "verdict": "agree", "basis": "line", "reason": None}
    if absence_ok:
        return {
            **entry,
            "verdict": "agree",
            "basis": "absence",
            "reason": f"the failing step ({step or verb}) is not traced; no success line for the target",
        }
    return {
        **entry,
        "verdict": "disagree",
        "basis": "line",
        "reason": "record says denied, kernel shows no blocked line for the target",
    }


def report(batches: Sequence[tuple[str, str | None, Path | None, list[dict[str, Any]]]]) -> dict[str, Any]:
    """The corroboration report over (mode, run_id, archive, records) of each runner batch."""
    runs, entries = [], []
    for mode, run_id, archive, records in batches:
        lines = kernel_lines(archive) if archive else []
        runs.append(
            {
                "mode": mode,
                "run_id": run_id,
                "archive": archive.name if archive else None,
                "kernel_lines": len(lines),
            }
        )
        for record in records:
            if archive is None:
                entries.append(
                    {
                        "probe": record["probe"]["id"],
                        "mode": mode,
                        "verdict": "not_checked",
                        "reason": "the run wrote no archive",
                    }
                )
            else:
                entries.append(judge(record, lines))
    counts = {v: sum(1 for e in entries if e["verdict"] == v) for v in ("agree", "disagree", "not_checked")}
    return {"schema": REPORT_SCHEMA, "runs": runs, "counts": counts, "entries": entries}
