"""Human output is safe: agent-controlled strings never reach a terminal raw.

The v0 rule already escapes controls in kernel values, but archives can come
from elsewhere and tool names come from the agent as they are, so every
renderer escapes on its own (runner/display.py). These tests feed raw
newlines, escape sequences, C1 and bidi controls through the summary, the
`diff` and `validate` CLIs and the log renderers.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from normalizer.build import normalize
from normalizer.surface import Preview
from runner.capture.status import summary
from runner.display import printable
from runner.evidence.archive import MANIFEST, build_manifest
from spool.format import read_spool

DATA = Path(__file__).parent / "data"
CLI = [sys.executable, "-m", "runner.cli.main"]
FAKE = "/x\n  health:            kernel_layer=complete drops=0\x1b[2J\x9b31m\u202e"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(("text", "shown"), [
    ("plain /path é", "plain /path é"),
    ("a\nb\tc", "a\\x0ab\\x09c"),
    ("\x1b[31mred\x7f", "\\x1b[31mred\\x7f"),
    ("\x9b\u202e\u2028", "\\u009b\\u202e\\u2028"),
    (b"\xff".decode("utf-8", "surrogateescape"), "\\xff"),
    # v0 values already write a backslash as `\\`: doubling it again would show another value
    ("a\\b", "a\\b"),
    ("\u200b\u200f\u2060\u2066x\u2069\ufeff", "\\u200b\\u200f\\u2060\\u2066x\\u2069\\ufeff"),
])
def test_printable(text: str, shown: str) -> None:
    assert printable(text) == shown


def _hostile_members(tmp_path: Path) -> Path:
    """An archive directory whose file values carry raw control characters (valid v0 JSON)."""
    run = normalize(read_spool(DATA / "example.spool"))
    members = {k: v if isinstance(v, bytes) else v.read_bytes() for k, v in run.members().items()}
    lines = [json.loads(line) for line in members["layers/kernel.ndjson"].splitlines()]
    target = next(e for e in lines if e["kind"] == "openat")
    old, target["value"] = target["value"], FAKE
    members["layers/kernel.ndjson"] = b"".join(msgspec.json.encode(e) + b"\n" for e in lines)
    surface = json.loads(members["capability-surface.json"])
    paths = set(surface["filesystem_paths"])
    if not any(e["kind"] == "openat" and e["value"] == old for e in lines):
        paths.discard(old)
    surface["filesystem_paths"] = sorted(paths | {FAKE})
    members["capability-surface.json"] = msgspec.json.encode(surface) + b"\n"
    members[MANIFEST] = build_manifest(run.run_id, members)
    out = tmp_path / "hostile"
    for name, data in members.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    return out


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)


def test_diff_output_has_no_raw_control_characters(tmp_path: Path) -> None:
    hostile = _hostile_members(tmp_path)
    assert _cli("validate", hostile).returncode == 0
    base = tmp_path / "base"
    run = normalize(read_spool(DATA / "example.spool"))
    members = {k: v if isinstance(v, bytes) else v.read_bytes() for k, v in run.members().items()}
    members[MANIFEST] = build_manifest(run.run_id, members)
    for name, data in members.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(data)
    proc = _cli("diff", base, hostile)
    assert proc.returncode == 0, proc.stderr
    assert printable(FAKE.rsplit("/", 1)[1]) in proc.stdout  # shown (grouped by directory), escaped
    assert RAW.findall(proc.stdout) == []
    faked = [line for line in proc.stdout.splitlines() if "kernel_layer=complete" in line]
    assert faked and all("\\x0a" in line for line in faked)  # only inside the escaped name


def test_summary_escapes_values() -> None:
    run = normalize(read_spool(DATA / "example.spool"))
    preview = msgspec.structs.replace(run.preview, execs=Preview(count=1, first=[FAKE]),
                                      written=Preview(count=1, first=[FAKE]),
                                      blocked=Preview(count=1, first=["\x1b]0;title\x07"]))
    hostile = dataclasses.replace(run, preview=preview)
    text = summary(hostile, 0, 1.0, "/out/\x1b[2J.tar.gz")
    assert RAW.findall(text) == []
    assert len(text.splitlines()) == len(summary(run, 0, 1.0, "/out/a.tar.gz").splitlines()) + 1  # + blocks
    assert [line for line in text.splitlines() if line.startswith("  health:")] == [
        line for line in summary(run, 0, 1.0, "/out/a.tar.gz").splitlines() if line.startswith("  health:")]
    assert printable(FAKE) in text


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_log_lines_escape_values(fmt: str) -> None:
    code = ("from runner.logs import configure_logging, get_logger\n"
            f"configure_logging({fmt!r}, True)\n"
            f"get_logger('t').warning('ev', argv=[{FAKE!r}], path={FAKE!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr.count("\n") == 1
    assert RAW.findall(proc.stderr) == []
