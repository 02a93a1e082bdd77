"""A daemon run's evidence delivery (runner/daemon/staging.py): the spool early, then the archive.

Real files, a real directory descriptor and the real fsuid switch (root, as
the daemon's worker is); no BPF.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from normalizer.build import normalize
from runner.capture.spawn import Credentials
from runner.daemon.staging import Delivery
from runner.errors import RunnerError
from runner.evidence.archive import archive_bytes
from spool.format import read_spool

pytestmark = pytest.mark.kernel  # the fsuid switch needs root
ROOT = Credentials(uid=0, gid=0, groups=(0,))


SPOOL = (Path(__file__).parent / "data" / "example.spool").read_bytes()


def _archive() -> bytes:
    """A real archive of the recorded example spool (the session checks every archive beside a spool)."""
    run = normalize(read_spool(Path(__file__).parent / "data" / "example.spool"), "r")
    return archive_bytes("r", run.members())


def _staged(tmp_path: Path) -> tuple[Path, Path]:
    staging, out = tmp_path / "staging", tmp_path / "out"
    staging.mkdir()
    out.mkdir()
    (staging / "r.spool").write_bytes(SPOOL)
    return staging, out


def test_the_spool_goes_first_and_the_archive_after(tmp_path: Path) -> None:
    staging, out = _staged(tmp_path)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        delivery = Delivery(staging, "r", fd, ROOT)
        delivery.spool_final()  # while the archive is still being made
        archive = _archive()
        (staging / "r.tar.gz").write_bytes(archive)
        assert delivery.finish() == ["r.tar.gz"]  # the spool went already
    finally:
        os.close(fd)
    assert (out / "r.spool").read_bytes() == SPOOL
    assert (out / "r.tar.gz").read_bytes() == archive
    assert sorted(p.name for p in out.iterdir()) == ["r.spool", "r.tar.gz"]  # no temp file left


def test_without_an_early_spool_both_go_at_the_end(tmp_path: Path) -> None:
    """A run that failed before its spool was final: whatever exists is delivered, spool first."""
    staging, out = _staged(tmp_path)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert Delivery(staging, "r", fd, ROOT).finish() == ["r.spool"]
    finally:
        os.close(fd)
    assert (out / "r.spool").read_bytes() == SPOOL


def test_a_failed_early_delivery_is_reported_at_the_end(tmp_path: Path) -> None:
    staging, out = _staged(tmp_path)
    (staging / "r.tar.gz").write_bytes(_archive())
    delivery = Delivery(staging, "r", 999_999, ROOT)  # no such descriptor: the copy cannot be made
    delivery.spool_final()
    with pytest.raises(RunnerError, match=r"cannot write r\.spool into --out"):
        delivery.finish()
    assert list(out.iterdir()) == []
