"""`show` and `report` on recorded captures (no root): tree, windows, escaping, self-containment."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from runner.display import printable
from runner.evidence.archive import MANIFEST, read_archive, write_archive
from runner.review.notes import MEANINGS
from tests.support import ROOT, assay

DATA = ROOT / "tests" / "data"
HOSTILE = "/tmp/\x1b]0;owned\x07<script>alert(1)</script>\u202etxt.exe\nnext"

def _normalized(tmp_path: Path, name: str = "threads") -> Path:
    archive = tmp_path / f"{name}.tar.gz"
    done = assay("normalize", DATA / f"{name}.spool", "--out", archive)
    assert done.returncode == 0, done.stderr
    shutil.copyfile(DATA / f"{name}.spool", tmp_path / f"{name}.spool")
    return archive

def _hostile(tmp_path: Path) -> Path:
    """The threads archive with one file path replaced by terminal- and HTML-hostile text.

    Written as no run would write it (a raw control character in a value), so
    it is kept apart from the runner-written archives the session checks.
    """
    source = _normalized(tmp_path)
    members = read_archive(source)
    lines = members["layers/kernel.ndjson"].decode().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "openat")
    event = json.loads(lines[index])
    event["value"] = HOSTILE
    lines[index] = json.dumps(event, separators=(",", ":"))
    members["layers/kernel.ndjson"] = ("\n".join(lines) + "\n").encode()
    del members[MANIFEST]
    hostile = tmp_path / "hostile.tar.gz"  # no spool beside it: not a runner-written archive
    write_archive(hostile, "threads", members)
    return hostile

def test_show_builds_the_process_tree_from_the_spool(tmp_path: Path) -> None:
    archive = _normalized(tmp_path)
    view = json.loads(assay("show", archive, "--json").stdout)
    assert view["spool"] == str(tmp_path / "threads.spool")
    kernel = [json.loads(line) for line in read_archive(archive)["layers/kernel.ndjson"].splitlines()]
    procs = {p["pid"]: p for p in view["processes"]}
    assert set(procs) == {e["pid"] for e in kernel}
    assert [pid for pid, p in procs.items() if p["parent"] is None] == [1]
    for pid, p in procs.items():
        assert p["events"] == sum(1 for e in kernel if e["pid"] == pid)
        for child in p["children"]:
            assert procs[child]["parent"] == pid
    assert len(procs) > 1 and procs[1]["children"], "the recorded run forks children"
    text = assay("show", archive).stdout
    assert "processes:\n  pid 1 (" in text
    assert "\n    pid 2 (" in text, "children are indented under their parent"

def test_show_without_a_spool_says_what_it_cannot_know(tmp_path: Path) -> None:
    archive = _normalized(tmp_path)
    view = json.loads(assay("show", archive, "--json", "--no-spool").stdout)
    assert view["spool"] is None and view["timeline"].startswith("no spool")
    assert all(p["parent"] is None for p in view["processes"])
    assert all(ph["offset_ms"] is None for ph in view["phases"])

def test_show_refuses_a_spool_that_is_not_the_archives(tmp_path: Path) -> None:
    archive = _normalized(tmp_path)
    done = assay("show", archive, "--spool", DATA / "example.spool")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not this archive's spool" in done.stderr

def test_files_are_grouped_by_directory_with_their_access_modes(tmp_path: Path) -> None:
    archive = _normalized(tmp_path)
    view = json.loads(assay("show", archive, "--json").stdout)
    kernel = [json.loads(line) for line in read_archive(archive)["layers/kernel.ndjson"].splitlines()]
    opened: dict[str, set[str]] = {e["value"]: set() for e in kernel if e["kind"] == "openat"}
    for e in kernel:
        if e["kind"] == "openat":
            opened[e["value"]].add(e["access_mode"])
    seen = {}
    for group in view["directories"]:
        for f in group["files"]:
            assert f["path"] == f"{group['directory']}/{f['name']}"
            seen[f["path"]] = set(f["access_modes"])
    assert seen == opened
    directories = [g["directory"] for g in view["directories"]]
    assert directories == sorted(directories)

def test_show_escapes_every_control_character(tmp_path: Path) -> None:
    archive = _hostile(tmp_path)
    out = assay("show", archive).stdout
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert printable(HOSTILE.rsplit("/", 1)[-1]) in out
    assert "\\x1b]0;owned\\x07" in out and "\\u202e" in out and "\\x0anext" in out

def test_report_escapes_html_and_loads_nothing(tmp_path: Path) -> None:
    archive = _hostile(tmp_path)
    html_file = tmp_path / "r.html"
    done = assay("report", archive, "-o", html_file)
    assert done.returncode == 0, done.stderr
    page = html_file.read_text()
    assert "<script" not in page.lower()
    # the path's last "/" is inside "</script>": the directory ends in "<", the name starts "script>"
    assert "&lt;script&gt;alert(1)&lt;/" in page and "script&gt;\\u202etxt.exe\\x0anext" in page
    assert "\x1b" not in page and "\u202e" not in page
    assert "default-src 'none'" in page
    assert not re.search(r"""(?:src|href)\s*=|url\(|@import""", page, re.I), "no resource references"

def test_every_note_code_the_normalizer_writes_has_a_meaning() -> None:
    codes = set()
    for path in (ROOT / "normalizer").rglob("*.py"):
        codes |= set(re.findall(r"""["']([a-z][a-z0-9_]{2,}): """, path.read_text()))
    assert codes, "the normalizer writes notes"
    assert codes - set(MEANINGS) == set()

