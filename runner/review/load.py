"""Load one run for review: the archive, and its spool when given or found beside it."""

from __future__ import annotations

from pathlib import Path

from normalizer.artifacts import KernelEvent
from runner.errors import EXIT_BAD_INPUT, RunnerError
from runner.evidence.bounded import ArchiveError, open_members
from runner.review.spool_facts import SpoolMismatch, read_facts, spool_beside
from runner.review.view import KERNEL, ReviewError, RunView, StreamedLines, build_view


def load_view(archive: Path, spool: Path | None, find_spool: bool = True) -> RunView:
    """The review of `archive`; a RunnerError (exit 2) names what cannot be read.

    Without `spool`, `ID.spool` beside `ID.tar.gz` is used when it exists
    (where `run` writes it) and `find_spool` is set.
    """
    if not archive.exists():
        raise RunnerError(f"{archive}: no such archive or directory", EXIT_BAD_INPUT)
    if spool is not None and not spool.is_file():
        raise RunnerError(f"--spool {spool}: no such file", EXIT_BAD_INPUT)
    try:
        members = open_members(archive)
    except (ArchiveError, OSError) as exc:
        raise RunnerError(f"{archive}: unreadable: {exc}", EXIT_BAD_INPUT) from exc
    if spool is None and find_spool and not archive.is_dir():
        spool = spool_beside(archive)
    facts = None
    try:
        if spool is not None:
            facts = read_facts(spool, StreamedLines(members, KERNEL, KernelEvent))
        return build_view(archive, members, facts)
    except (ReviewError, SpoolMismatch, ArchiveError) as exc:
        raise RunnerError(f"{archive}: {exc}", EXIT_BAD_INPUT) from exc
