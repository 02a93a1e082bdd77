"""The --out check (runner/enforce/outguard.py) on scratch trees, asked as nobody.

Needs root (it forks and drops to nobody to ask access(2)), hence `kernel`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from policy.load import load_preset
from policy.model import resolve
from runner.capture.spawn import Credentials
from runner.enforce.outguard import command_controls, lookups, unconfined_root

pytestmark = pytest.mark.kernel

NOBODY = Credentials(uid=65534, gid=65534, groups=(65534,))
ROOT = Credentials(uid=0, gid=0, groups=(0,))


@pytest.fixture
def public() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="assay-outguard-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base)


def test_lookups_follow_a_symlink_chain_hop_by_hop(public: Path) -> None:
    (public / "safe").mkdir()
    (public / "open").mkdir(mode=0o777)
    (public / "open").chmod(0o777)
    (public / "open" / "hop2").symlink_to(public / "safe")
    (public / "hop1").symlink_to(public / "open" / "hop2")
    steps, final = lookups(public / "hop1" / "runs")
    assert (str(public / "open"), "hop2") in [(s.parent, s.name) for s in steps]
    assert final == str(public / "safe")
    reason = command_controls(public / "hop1" / "runs", NOBODY, None)
    assert reason is not None and "hop2 is a symlink" in reason
    assert command_controls(public / "safe" / "runs", NOBODY, None) is None


def test_a_path_through_a_file_is_not_a_crash(public: Path) -> None:
    (public / "file").write_text("")
    assert command_controls(public / "file" / "runs", NOBODY, None) is None  # mkdir reports it


def test_policy_trees_count_by_their_real_path(public: Path) -> None:
    """A write tree named through a symlink grants its target (Landlock binds inodes)."""
    (public / "real").mkdir()
    (public / "alias").symlink_to(public / "real")
    doc = load_preset("workspace-write")
    policy = resolve(doc, workspace=str(public / "alias"), home="/nonexistent", tmpdir="/tmp")
    assert not unconfined_root(ROOT, policy)
    reason = command_controls(public / "real" / "runs", ROOT, policy)
    assert reason is not None
    assert command_controls(public / "elsewhere", ROOT, policy) is None
    assert unconfined_root(ROOT, None) and not unconfined_root(NOBODY, None)
