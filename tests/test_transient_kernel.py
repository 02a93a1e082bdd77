"""Transient random names on real tools: three byte-identical runs, and strace as the witness.

Each workload runs under `assay-runner determinism --runs 3`: the random
temporary names its tools pick must come out as canonical placeholders, so
the archives are byte-identical. A second run of the same job under
`strace -f` inside the runner counts, independently of the normalizer, the
files created with a random name and gone by the end; the health note's
substitution count must equal it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support import Archive, assay
from test_determinism import determinism

pytestmark = pytest.mark.kernel

PROGRAMS = Path(__file__).parent / "programs" / "transient"
NOTE = re.compile(r"^transient_names: substituted=(\d+)$")


def _git(work: Path) -> list[str]:
    return ["sh", str(PROGRAMS / "git_job.sh")]


# What is random in each workload, written out by hand from the tools' own
# documentation and traces: independent of the normalizer's template table.
RANDOM = {
    "git": re.compile(r"(/\.git/objects/[0-9a-f]{2}/tmp_obj_\w{6}|/\.git/t\w{6})$"),
}
WORKLOADS: dict[str, Callable[[Path], list[str]]] = {"git": _git}


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
    line = re.compile(r'^\d+ +(\w+)\((.*)\) += (-?\d+) ?(\w*)')
    quoted = re.compile(r'"((?:[^"\\]|\\.)*)"')
    exists: dict[str, bool] = {}
    for text in trace.read_text().splitlines():
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
