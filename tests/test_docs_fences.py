"""Every code fence in the project's Markdown is closed (an unclosed one turns the rest of a
page into one code block), checked the way CommonMark reads fences."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import ROOT

PAGES = sorted({*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), *ROOT.glob("*/README.md"),
                *ROOT.glob("*/AGENTS.md")})  # fmt: skip
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def unclosed_fence(text: str) -> int | None:
    """The 1-based line of a fence that is never closed, else None."""
    opened: tuple[str, int] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if not match:
            continue
        marks, rest = match.groups()
        if opened is None:
            if not (marks[0] == "`" and "`" in rest):
                opened = (marks, number)
        elif marks[0] == opened[0][0] and len(marks) >= len(opened[0]) and not rest.strip():
            opened = None
    return opened[1] if opened else None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fence_is_closed(page: Path) -> None:
    assert unclosed_fence(page.read_text(encoding="utf-8")) is None


def test_the_check_finds_an_unclosed_fence() -> None:
    assert unclosed_fence("a\n```\ncode\n```\nb\n```toml\nx = 1\n") == 6
    assert unclosed_fence("````\n```\n````\n") is None  # a shorter fence inside a longer one is text
    assert unclosed_fence("~~~\n```\n~~~\n") is None
    assert PAGES and ROOT / "docs" / "architecture.md" in PAGES
