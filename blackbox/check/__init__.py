"""`check-events`: every per-line and run-level rule of the black-box contract.

Lines are read as bytes: a line that is not UTF-8 or not a JSON object is
one `format` violation and takes no further part; every other rule family
runs on the lines that parsed. Violations come sorted by line, then rule.
"""

from __future__ import annotations

import json
from pathlib import Path

from blackbox.check import catalog_rules, fields, integrity, patterns, run
from blackbox.check.base import Line, Violation


def parse_lines(data: bytes) -> tuple[list[Line], list[Violation]]:
    """Parsed lines and the format violations (UTF-8, one JSON object per line)."""
    lines: list[Line] = []
    bad: list[Violation] = []
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    elif raw_lines and data:
        bad.append(Violation(len(raw_lines), "format",
                             "the last line does not end with a newline (torn write?)"))
    for n, raw in enumerate(raw_lines, start=1):
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad.append(Violation(n, "format", f"not UTF-8 (byte {exc.start})"))
            continue
        except json.JSONDecodeError as exc:
            bad.append(Violation(n, "format", f"not valid JSON ({exc.msg} at column {exc.colno})"))
            continue
        if not isinstance(obj, dict):
            bad.append(Violation(n, "format", f"a line must be a JSON object, got {type(obj).__name__}"))
            continue
        lines.append(Line(n, obj))
    if not raw_lines:
        bad.append(Violation(1, "format", "the file is empty: a run has at least run_started"))
    return lines, bad


def check_bytes(data: bytes, artifacts_dir: Path | None = None) -> list[Violation]:
    """Every violation of an events.jsonl given as bytes; with `artifacts_dir`, its files' hashes too."""
    lines, out = parse_lines(data)
    for line in lines:
        out += fields.check(line)
        out += patterns.check(line)
    out += run.check(lines)
    out += catalog_rules.check(lines)
    if artifacts_dir is not None:
        out += integrity.check(lines, artifacts_dir)
    return sorted(set(out))


def check_file(path: Path, verify_artifacts: bool = False) -> list[Violation]:
    """The violations of an events.jsonl; `verify_artifacts` holds the files beside it to their hashes."""
    return check_bytes(path.read_bytes(), path.parent if verify_artifacts else None)
