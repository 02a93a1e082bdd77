"""No doc, comment or docstring cites the project's issue tracker by number.

The tracker is not in the repository, so "issue 14" or "#16" tells a reader
nothing and goes stale; a decision is explained where it is made, its history
is in git. An external tracker's number stays when it names its project
("pytest-xdist issue 1386") or quotes that project's commit subject.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SELF = Path(__file__).resolve()
ROOT = SELF.parent.parent
SUFFIXES = {".md", ".py", ".c", ".h", ".toml", ".yml", ".yaml", ".sh", ".cfg", ".txt"}
NAMES = {"Makefile", "Dockerfile"}
SKIP_DIRS = {".git", ".venv", "build", "runs", "probe-runs", "node_modules", "__pycache__",
             ".pytest_cache", ".ruff_cache", ".hypothesis", "upstream_fencerunner"}  # fmt: skip

# "issue 8", "issues 3 and 4", "Issue #16", "issue no. 2"
ISSUE = re.compile(r"\bissues?\s*(?:#|no\.\s*)?\d+", re.IGNORECASE)
# "#16" standing alone in Markdown prose; not "#1f7a3a", "&#10;", "C#" or "x#2"
HASH = re.compile(r"(?<![\w&#/])#\d{1,5}(?![\w])")
# External references that name their own project.
EXTERNAL = ("pytest-xdist issue 1386", "project reviewed run records (#2592)")


def _files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path == SELF:  # its examples are the check's own input
            continue
        if path.is_file() and (path.suffix in SUFFIXES or path.name in NAMES):
            out.append(path)
    return sorted(out)


def issue_numbers(text: str, markdown: bool) -> list[str]:
    """Each tracker citation in `text`, as `line: match`; external references are not."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for external in EXTERNAL:
            line = line.replace(external, "")
        hits = [m.group(0) for m in ISSUE.finditer(line)]
        if markdown:
            hits += [m.group(0) for m in HASH.finditer(line)]
        found += [f"{number}: {hit}" for hit in hits]
    return found


FILES = _files()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    assert issue_numbers(text, path.suffix == ".md") == []


def test_the_check_finds_issue_numbers() -> None:
    assert issue_numbers("fixed in issue 14, see\nIssue #8 and issues 3", markdown=False) == [
        "1: issue 14", "2: Issue #8", "2: issues 3"]  # fmt: skip
    assert issue_numbers("as #16 said", markdown=True) == ["1: #16"]
    assert issue_numbers("as #16 said", markdown=False) == []  # a code comment's `#` is not a citation
    for innocent in ("color:#1f7a3a", "&#10;", "HTTP 404, errno 13", "exit 125", "## 2. Setup",
                     "pytest-xdist issue 1386", "a tissue 3 ply", "command_logs.jsonl #3"):
        md = innocent != "command_logs.jsonl #3"
        assert issue_numbers(innocent, markdown=md) == [], innocent
    names = {str(p.relative_to(ROOT)) for p in FILES}
    assert {"README.md", "docs/architecture.md", "tests/README.md", "normalizer/__init__.py"} <= names
