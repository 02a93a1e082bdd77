"""Transient random names on real tools: three byte-identical runs, and strace as the witness.

Each workload runs under `assay-runner determinism --runs 3`: the random
temporary names its tools pick must come out as canonical placeholders, so
the archives are byte-identical. A second run of the same job under
`strace -f` inside the runner counts, independently of the normalizer, the
files created with a random name and gone by the end; the health note's
substitution count must equal it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.evidence.archive import read_archive
from tests.determinism_support import determinism
from tests.strace_witness import joined
from tests.support import Archive, assay

pytestmark = pytest.mark.kernel

PROGRAMS = Path(__file__).parent / "programs" / "transient"
NOTE = re.compile(r"^transient_names: substituted=(\d+)$")


def _git(work: Path) -> list[str]:
    return ["sh", str(PROGRAMS / "git_job.sh")]


def _c_link(work: Path) -> list[str]:
    # The determinism test's sources, built the ordinary way (clink/Makefile: no -pipe, ar, a link).
    for source in (PROGRAMS.parent / "determinism" / "cproject").glob("*.[ch]"):
        shutil.copy(source, work)
    shutil.copytree(PROGRAMS / "clink", work, dirs_exist_ok=True)
    return ["make", "-j2"]


def _pytest(work: Path) -> list[str]:
    return ["env", f"PYTHON={sys.executable}", "PYTHONDONTWRITEBYTECODE=1",
            "sh", str(PROGRAMS / "pytest_job.sh")]


def _wheel(path: Path) -> None:
    """A one-module wheel, made by hand so the test needs no build backend."""
    files = {"demo_pkg/__init__.py": b"VALUE = 1\n",
             "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
             "demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             b"Tag: py3-none-any\n"}
    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = [f"{n},sha256={digest(d)},{len(d)}" for n, d in files.items()]
    record.append("demo_pkg-1.0.dist-info/RECORD,,")
    files["demo_pkg-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)


def _pip(work: Path) -> list[str]:
    _wheel(work / "demo_pkg-1.0-py3-none-any.whl")
    pip = Path(sys.executable).parent / "pip"
    return ["env", f"PIP={pip}", "sh", str(PROGRAMS / "pip_job.sh")]


def _npm(work: Path) -> list[str]:
    npm = shutil.which("npm")
    assert npm, "npm is installed by scripts/setup.sh"
    src = work.parent / "demo-lib"
    src.mkdir()
    (src / "package.json").write_text('{"name": "demo-lib", "version": "1.0.0", "main": "index.js"}\n')
    (src / "index.js").write_text("module.exports = 1;\n")
    subprocess.run([npm, "pack", "--silent", "--pack-destination", str(work)], cwd=src, check=True,
                   capture_output=True, env={**os.environ, "HOME": str(work.parent)})
    return ["sh", str(PROGRAMS / "npm_job.sh")]


# What is random in each workload, written out by hand from the tools' own
# documentation and traces: independent of the normalizer's template table.
RANDOM = {
    "git": re.compile(r"(/\.git/objects/[0-9a-f]{2}/tmp_obj_\w{6}|/\.git/t\w{6})$"),
    "c-link": re.compile(r"(^/tmp/cc\w{6}\.[\w.]+|/st\w{6})$"),
    "pytest": re.compile(r"(/pytest-cache-files-\w{8}|^/tmp/\w{8})$"),
    "pip": re.compile(r"(/pip-[a-z-]+-\w{8}|/tmp\w{8}|^/tmp/\w{8}|\.pyc\.\d+|\w{8}\.tmp)$"),
    "npm": re.compile(r"/_cacache/tmp/(\w{6}|[0-9a-f-]{36})$"),
}
WORKLOADS: dict[str, Callable[[Path], list[str]]] = {
    "git": _git, "c-link": _c_link, "pytest": _pytest, "pip": _pip, "npm": _npm}


def substituted(archive: Archive) -> int:
    counts = [int(m.group(1)) for n in archive.health["notes"] if (m := NOTE.match(n))]
    return counts[0] if counts else 0


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_real_tool_workloads_are_byte_identical(tmp_path: Path, name: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc, report = determinism(tmp_path / "out", name, work, *WORKLOADS[name](work))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["identical"] and report["passed"]
    archive = Archive(tmp_path / "out" / "run-1" / f"{name}.tar.gz")
    assert substituted(archive) > 0
    values = [e["value"] for e in archive.kernel if e["value"]]
    assert any("~1" in v for v in values)
    assert not [v for v in values if RANDOM[name].search(v)], "a raw random name survived"


def _strace_transients(trace: Path, cwd: Path, random: re.Pattern[str]) -> set[str]:
    """Random names the traced job created (or tried to, in a missing directory), gone at the end."""
    line = re.compile(r'^\d+ (\w+)\((.*)\) += (-?\d+) ?(\w*)')
    quoted = re.compile(r'"((?:[^"\\]|\\.)*)"')
    exists: dict[str, bool] = {}
    for text in joined(trace):
        m = line.match(text)
        if m is None:
            continue
        call, args, failed = m.group(1), m.group(2), int(m.group(3)) < 0
        paths = [p if p.startswith("/") else str(cwd / p) for p in quoted.findall(args)]
        if failed:  # a create attempt where the directory is missing: the name never existed
            if call in ("openat", "open") and "O_CREAT" in args and m.group(4) == "ENOENT":
                exists.setdefault(paths[0], False)
            continue
        if (call in ("openat", "open") and "O_CREAT" in args) or call in ("mkdir", "mkdirat"):
            exists[paths[0]] = True
        elif call in ("symlink", "symlinkat", "link", "linkat"):
            exists[paths[-1]] = True
        elif call in ("unlink", "unlinkat", "rmdir"):
            exists[paths[0]] = False
        elif call.startswith("rename"):
            exists[paths[0]], exists[paths[-1]] = False, True
    return {p for p, alive in exists.items() if not alive and random.search(p)}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_substitutions_match_what_strace_sees(tmp_path: Path, name: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    trace = tmp_path / "trace.txt"
    strace = shutil.which("strace")
    assert strace, "strace is installed by scripts/setup.sh"
    # Paths relative to the job's directory: git_job.sh works in ./repo.
    cmd = [strace, "-f", "-qq", "-o", str(trace), "-e",
           "trace=open,openat,mkdir,mkdirat,symlink,symlinkat,link,linkat,unlink,unlinkat,rmdir,"
           "rename,renameat,renameat2", *WORKLOADS[name](work)]
    proc = assay("run", "--out", tmp_path / "out", "--run-id", name, "--workdir", work, "--", *cmd)
    assert proc.returncode == 0, proc.stderr
    seen = _strace_transients(trace, work / "repo", RANDOM[name])
    assert seen, "the witness saw no random temporary names"
    assert substituted(Archive(tmp_path / "out" / f"{name}.tar.gz")) == len(seen)


def test_kept_random_and_time_stamped_names_still_fail(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = ('f=$(mktemp -p "$PWD" keep.XXXXXX); echo data > "$f"; '  # mkstemp, kept
              'date +%s%N > "stamp-$(date +%s%N).txt"')  # a name from the clock, kept
    proc, report = determinism(tmp_path / "out", "kept", work, "sh", "-c", script)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    surface = next(d for d in report["differing_members"] if d["member"] == "capability-surface.json")
    added = surface["runs"][0]["surface_changes"]["filesystem_paths"]["added"]
    assert any("/keep." in p and "~" not in p for p in added), added
    assert any("/stamp-" in p for p in added), added
    assert "only in run 2:" in proc.stdout and "/stamp-" in proc.stdout


def test_a_file_whose_content_depends_on_the_time_fails_naming_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc, report = determinism(tmp_path / "out", "clock", work, "sh", "-c",
                               "date +%s%N > stamp.txt; echo same > same.txt")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert report["identical"], "the archives cannot see content: they are byte-identical"
    assert report["workdir_compared"] and not report["workdir_identical"] and not report["passed"]
    (diff,) = report["workdir_differences"]
    assert diff["path"] == "stamp.txt"
    assert len(set(diff["entries"])) == 3 and all(e.startswith("file 0644 sha256:") for e in diff["entries"])
    assert len({r["workdir_sha256"] for r in report["runs"]}) == 3
    assert "workdir end state: 1 path(s) differ:\n  stamp.txt\n    run 1: file 0644 sha256:" in proc.stdout
    assert "result: FAIL (workdir end state differs)" in proc.stdout
    assert not any(work.iterdir())  # restored


def test_show_prints_the_raw_name_beside_each_canonical_one(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc = assay("run", "--out", tmp_path / "out", "--run-id", "git", "--workdir", work, "--", *_git(work))
    assert proc.returncode == 0, proc.stderr
    archive = tmp_path / "out" / "git.tar.gz"
    view = json.loads(assay("show", "--json", archive).stdout)
    pairs = [(t["canonical"], t["raw"]) for t in view["transient_names"]]
    assert len(pairs) == substituted(Archive(archive)) > 0
    for canonical, raw in pairs:
        assert RANDOM["git"].search(raw) and "~" not in raw, raw
        head, number = canonical.rsplit("~", 1)
        assert raw.startswith(head) and number.isdigit() and len(raw) > len(head)
    assert "transient names:" in assay("show", archive).stdout  # folded to a count by default
    text = assay("show", "--all", archive).stdout
    assert "transient names (canonical in the archive <- raw in the spool):" in text
    assert all(f"  {c}  <-  {r}" in text for c, r in pairs)
    # raw names stay out of the v0 members
    members = read_archive(archive)
    assert not [r for _, r in pairs for data in members.values() if r.encode() in data]
    assert json.loads(assay("show", "--json", "--no-spool", archive).stdout)["transient_names"] == []
