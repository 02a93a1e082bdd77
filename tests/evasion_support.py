"""Runs one technique of tests/programs/evasion.py under the runner, as root or as `nobody`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Archive, run_observed, unique_run_id

PY = "/usr/bin/python3"
PROGRAM = Path(__file__).resolve().parent / "programs" / "evasion.py"
USERS = ("root", "nobody")


@pytest.fixture
def work() -> Iterator[Path]:
    """A directory every user can write (the technique runs as `nobody` too), removed after."""
    path = Path(tempfile.mkdtemp(prefix="assay-evasion-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def evade(out: Path, work: Path, technique: str, user: str) -> Archive:
    """The archive of `technique` done in `work` by `user` (it exits 0 or the test fails)."""
    run_id = unique_run_id(technique.replace("_", "-"))
    proc = run_observed(out, run_id, PY, PROGRAM, technique, work, workdir=work,
                        extra=("--user", user))
    assert proc.returncode == 0, proc.stderr
    return Archive(out / f"{run_id}.tar.gz")


def lines(archive: Archive, *event_types: int) -> list[tuple[int, str | None]]:
    """(event_type, value) of the archive's kernel lines of those types, in order."""
    return [(e["event_type"], e["value"]) for e in archive.kernel if e["event_type"] in event_types]


def not_passing_because_paths(archive: Archive) -> str:
    """The s3_path_namespace note of an archive whose health is not passing because of it."""
    health = archive.health
    assert health["cgroup_correlation"] == "partial", health
    return next(n for n in health["notes"] if n.startswith("s3_path_namespace: "))
