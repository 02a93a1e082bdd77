"""Memos and batching in the normalizer are speed only: shrinking them to nothing changes no byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from normalizer import build, collector, kernel_lines, paths
from normalizer.build import normalize
from runner.evidence.archive import archive_bytes
from spool.format import read_spool

DATA = Path(__file__).resolve().parent / "data"


def _archive(spool: Path) -> bytes:
    run = normalize(read_spool(spool))
    return archive_bytes(run.run_id, run.members())


@pytest.mark.parametrize("name", ["example.spool", "threads.spool"])
def test_memo_sizes_do_not_change_the_archive(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    expected = _archive(DATA / name)
    monkeypatch.setattr(paths, "JOIN_MEMO", 1)
    monkeypatch.setattr(collector, "MEMO_ENTRIES", 1)
    monkeypatch.setattr(kernel_lines, "LINES_PER_WRITE", 1)
    monkeypatch.setattr(build, "SPILL_EVERY", 2)
    assert _archive(DATA / name) == expected


def test_the_join_shortcuts_agree_with_posixpath() -> None:
    """`joined` skips posixpath for already-normal paths; it must answer as posixpath does."""
    import itertools
    import posixpath

    parts = ["a", ".", "..", "", "b.c", "...", ".x", "d/", "/e", "//f", "g/./h", "i/../j"]
    bases = ["/", "//", "/w", "/w/", "/w/./x", "/w/../y", "//w", "/w//x", "rel", "rel/x"]
    names = {"".join(p) for n in (1, 2, 3) for p in itertools.product(parts, repeat=n)} - {""}
    for name in names:
        if name.startswith("/"):
            assert paths.joined(None, name) == posixpath.normpath(name).replace("//", "/", 1), name
        for base in bases:
            expected = (posixpath.normpath(name).replace("//", "/", 1) if name.startswith("/")
                        else posixpath.normpath(posixpath.join(base, name)))
            assert paths.joined(base, name) == expected, (base, name)
        assert paths.joined(None, name) == (None if not name.startswith("/") else
                                             posixpath.normpath(name).replace("//", "/", 1))
