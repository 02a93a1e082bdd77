"""Check normalized members against the contract, then write the archive."""

from __future__ import annotations

from pathlib import Path

from normalizer.build import NormalizedRun
from runner.archive import MANIFEST, build_manifest, write_archive
from runner.errors import RunnerError


def publish(run: NormalizedRun, archive: Path) -> None:
    """Validate what is about to be written and write it atomically.

    A member that fails the contract is a runner bug: nothing is written, and
    the raw spool stays for `assay-runner normalize` once it is fixed.
    """
    from runner.validate import validate_members

    members = run.members()
    problems = validate_members({MANIFEST: build_manifest(run.run_id, members), **members})
    if problems:
        shown = "; ".join(problems[:3])
        raise RunnerError(f"normalized archive fails validation ({len(problems)} problems): {shown}")
    write_archive(archive, run.run_id, members)
