"""Every archive the runner writes during the suite passes both conformance checks, and a failure
names the test that wrote it.

An archive the runner wrote is `ID.tar.gz` next to its `ID.spool`. After
each test, conftest.py checks the archives under the directories that test
owns: its `tmp_path`, the top-level directories of the session's base
temporary directory made while it ran (its fixtures' `mktemp`), and any
directory under the base that one of its fixtures returned. The test fails
in its teardown when one of them does not conform. What a test wrote
elsewhere under the base (a directory an earlier test's fixture made and
returned inside another object) is checked after the session, and each
failure there names the test that was running when the archive was written
(its modification time).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from runner.evidence.archive import read_archive
from runner.evidence.validate import validate_members
from tests.support import ASSAY_COMPAT, ON_CI, assay_compat


def runner_written_archives(base: Path) -> list[Path]:
    """Archives the runner wrote under `base`: each `ID.tar.gz` next to its `ID.spool`."""
    return sorted(p for p in base.rglob("*.tar.gz") if p.with_suffix("").with_suffix(".spool").is_file())


def problems(archives: list[Path]) -> list[str]:
    """What the project's check and `assay_compat.py` (one call for all) say is wrong in `archives`."""
    found = []
    for archive in archives:
        try:
            found += [f"{archive}: {p}" for p in validate_members(read_archive(archive))]
        except Exception as exc:  # an unreadable archive is a problem to report, not a crash of the suite
            found.append(f"{archive}: unreadable: {exc}")
    if not archives or found:
        return found
    if not ASSAY_COMPAT.is_file():
        # off CI without ../shared: the project's own check above still ran
        return [f"{ASSAY_COMPAT} is missing: clone the repo with ../shared/ beside it"] if ON_CI else []
    proc = assay_compat(*archives)
    return [] if proc.returncode == 0 else [f"assay_compat.py: {proc.stdout[-5000:]}{proc.stderr}"]


@dataclass
class Span:
    """One test, from before its first fixture to after its last finalizer, in file-time nanoseconds."""

    nodeid: str
    start_ns: int
    end_ns: int | None = None


@dataclass
class ArchiveWatch:
    """Which archives each test wrote, checked once each."""

    clock: Path
    """A file of the watch's own: touched, its modification time is now as files see it (the kernel's
    coarse clock, behind `time.time_ns()` by up to a tick)."""
    base: Path | None = None
    checked: set[tuple[Path, int]] = field(default_factory=set)
    """Archives checked, with their modification times: one written again is checked again."""
    spans: list[Span] = field(default_factory=list)
    _before: set[str] = field(default_factory=set)

    def begin(self, nodeid: str) -> None:
        """Before the test's set-up: what the base already holds."""
        self._before = set(os.listdir(self.base)) if self.base and self.base.is_dir() else set()
        self.spans.append(Span(nodeid, self._now()))

    def end(self, values: Iterable[object]) -> list[str]:
        """After the test's teardown: the problems of the archives in the directories it owned
        (`values`: its fixtures' values, its `tmp_path` among them)."""
        self.spans[-1].end_ns = self._now()
        if self.base is None or not self.base.is_dir():
            return []
        roots = {self.base / name for name in set(os.listdir(self.base)) - self._before
                 if not (self.base / name).is_symlink()}  # pytest's `<name>current` links to the newest
        roots |= {v for v in values if isinstance(v, Path) and v.is_dir() and v.is_relative_to(self.base)}
        return problems(self._unchecked(a for root in sorted(roots) for a in runner_written_archives(root)))

    def leftover(self) -> list[str]:
        """After the session: the problems of archives no test's own check saw, each named by the
        test that was running when it was written."""
        if self.base is None or not self.base.is_dir():
            return []
        by_writer: dict[str, list[Path]] = {}
        for archive in self._unchecked(runner_written_archives(self.base)):
            by_writer.setdefault(self._writer(archive), []).append(archive)
        return [f"written by {writer}: {p}" for writer, archives in sorted(by_writer.items())
                for p in problems(archives)]

    def _unchecked(self, archives: Iterable[Path]) -> list[Path]:
        new = sorted({(a.resolve(), a.stat().st_mtime_ns) for a in archives} - self.checked)
        self.checked.update(new)
        return [a for a, _ in new]

    def _now(self) -> int:
        os.utime(self.clock)
        return self.clock.stat().st_mtime_ns

    def _writer(self, archive: Path) -> str:
        """The test whose span holds the modification time of `archive`."""
        written = archive.stat().st_mtime_ns
        return next((s.nodeid for s in self.spans if s.start_ns <= written <= (s.end_ns or written)),
                    "no test (between tests)")
