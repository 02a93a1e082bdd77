"""Against the real kernel: no name the command chooses breaks the run.

Non-UTF-8 bytes, newlines, escape sequences, a literal backslash-escape and
over-long paths, opened (and one exec'd) by a real program: the archive is
valid, every value decodes back to the exact bytes, distinct names stay
distinct, cut paths are marked, `normalize` rebuilds the same archive from
the spool, and nothing the runner prints carries a raw control character.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from normalizer.text import TRUNCATED, escape_bytes, unescape
from runner.evidence.archive import read_archive
from tests.support import Archive, assay, assay_compat

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
NAMES = [b"\xff", b"\xfe", b"a\nhealth: kernel_layer=complete", b"\x1b[2J\x1b[31mred",
         b"back\\xff", b"\xc2\x9bcsi", "caf\u00e9".encode()]
LONG = [b"/" + b"x" * 5000, b"/" + b"x" * 5000 + b"y"]
EXEC_NAME = b"run\x1b[31m\nme"
HOSTILE_ARG = "\x1b]0;pwned\x07"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")

SCRIPT = f"""
import os, subprocess
for name in {NAMES!r}:
    open(name, "w").close()
for path in {LONG!r}:
    try:
        open(path)
    except OSError:
        pass
os.symlink(b"/usr/bin/true", {EXEC_NAME!r})
subprocess.run([os.path.join(os.getcwd().encode(), {EXEC_NAME!r})], check=True)
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("work")
    out = tmp_path_factory.mktemp("out")
    proc = assay("run", "--out", out, "--run-id", "names", "--workdir", work,
                 "--", PY, "-c", SCRIPT, HOSTILE_ARG)
    assert proc.returncode == 0, proc.stderr
    return Archive(out / "names.tar.gz"), os.fsencode(str(work)), proc, out


def test_archive_is_valid(hostile) -> None:
    archive = hostile[0]
    proc = assay("validate", archive.path)
    assert proc.returncode == 0, proc.stdout
    compat = assay_compat(archive.path)
    assert compat.returncode == 0, compat.stdout[-3000:]


def test_values_are_lossless_and_distinct(hostile) -> None:
    archive, work, _, _ = hostile
    opened = {e["value"] for e in archive.kernel if e["kind"] == "openat"}
    expected = [escape_bytes(work + b"/" + name) for name in NAMES]
    assert [v for v in expected if v not in opened] == []
    assert len(set(expected)) == len(NAMES)
    assert [unescape(v) for v in expected] == [work + b"/" + name for name in NAMES]
    assert escape_bytes(work + b"/" + EXEC_NAME) in archive.values("exec")
    assert [v for v in archive.surface["filesystem_paths"] if RAW.search(v)] == []


def test_long_paths_are_whole_or_marked(hostile) -> None:
    """Captured whole (lossless, distinct) or cut at the kernel's limit and marked, with a note."""
    archive = hostile[0]
    values = [v for v in archive.values("openat") if v.startswith("/xxxx")]
    whole = [escape_bytes(p) for p in LONG]
    cut = [v for v in values if v.endswith(TRUNCATED)]
    assert sorted(set(values) - set(cut)) == sorted(set(values) & set(whole))
    assert len(set(values) & set(whole)) + len(cut) == len(LONG)
    for value in cut:
        assert any(p.startswith(unescape(value)) for p in LONG)
    notes = [n for n in archive.health["notes"] if n.startswith("s2_path_capture: ")]
    assert notes == ([f"s2_path_capture: truncated_paths={len(cut)}"] if cut else [])


def test_normalize_rebuilds_the_same_archive(hostile, tmp_path: Path) -> None:
    archive, _, _, out = hostile
    proc = assay("normalize", out / "names.spool", "--out", tmp_path / "again.tar.gz")
    assert proc.returncode == 0, proc.stderr
    assert read_archive(tmp_path / "again.tar.gz") == archive.members


def test_runner_output_has_no_raw_control_characters(hostile, tmp_path: Path) -> None:
    archive, _, proc, _ = hostile
    assert RAW.findall(proc.stderr) == []  # summary and every log line (argv included)
    assert "\\\\x1b]0;pwned\\\\x07" in proc.stderr  # the JSON argv log shows it, escaped
    base_out = tmp_path / "base"
    base = assay("run", "--out", base_out, "--run-id", "base", "--workdir", tmp_path, "--", "true")
    assert base.returncode == 0, base.stderr
    diff = assay("diff", base_out / "base.tar.gz", archive.path)
    assert diff.returncode == 0, diff.stderr
    assert "\\xff" in diff.stdout
    assert RAW.findall(diff.stdout + diff.stderr) == []


def test_determinism_takes_any_argv_byte(tmp_path: Path) -> None:
    """A non-UTF-8 argument and a control character reach the report losslessly and print escaped."""
    work = tmp_path / "work"
    work.mkdir()
    arg = os.fsdecode(b"\xff\x1b[2J")
    proc = assay("determinism", "--runs", "2", "--out", tmp_path / "out", "--run-id", "argv",
                 "--workdir", work, "--", "/usr/bin/true", arg)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert RAW.findall(proc.stdout + proc.stderr) == []
    report = (tmp_path / "out" / "determinism-report.json").read_text()
    assert '"\\\\xff\\\\x1b[2J"' in report  # the v0 text of the argument, JSON-escaped
