"""Evasion corpus: namespaces, mounts and roots. Each test is the trick, as root and as `nobody`.

After a mount namespace or root change, or any mount, the paths a run
reports may not be host paths: the change must be a kernel line and health
must not pass, naming why (`s3_path_namespace`). A refused attempt is a
kernel line of its own (+100).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.review.view import NOT_HOST_PATHS
from tests.evasion_support import USERS, evade, lines, not_passing_because_paths, work
from tests.support import assay

pytestmark = pytest.mark.kernel
__all__ = ["work"]


@pytest.mark.parametrize("user", USERS)
def test_unshare_and_bind_mount_alias_is_not_passing(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "unshare_bind", user)
    unshare = lines(archive, 160)
    assert unshare and "CLONE_NEWNS" in unshare[0][1], unshare
    assert (user == "root") == ("CLONE_NEWUSER" not in unshare[0][1])
    assert lines(archive, 163, 164) == [(163, None), (164, "/"), (163, f"{work}/home"), (164, f"{work}/doc")]
    # what the archive calls doc/ is home/: the paths are there, and health says they are not host paths
    assert f"{work}/doc/notes.txt" in archive.values("openat")
    note = not_passing_because_paths(archive)
    assert "processes=1 " in note and "mount_changes=2 " in note, note
    assert assay("validate", archive.path).returncode == 0
    view = json.loads(assay("show", archive.path, "--json").stdout)
    assert [p["pid"] for p in view["processes"] if p["paths_not_host"]] == [1]
    assert NOT_HOST_PATHS in assay("show", archive.path).stdout


@pytest.mark.parametrize("user", USERS)
def test_setns_is_a_line_and_not_passing_when_it_worked(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "setns", user)
    got = [(t, v) for t, v in lines(archive, 161, 261)]
    if user == "root":
        assert got == [(161, "/proc/self/ns/mnt")]
        assert "processes=1 " in not_passing_because_paths(archive)
    else:  # EPERM: the attempt is the evidence, nothing moved
        assert got == [(261, "/proc/self/ns/mnt")]


@pytest.mark.parametrize("user", USERS)
def test_mount_in_the_host_namespace(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "mount_tmpfs", user)
    if user == "root":
        assert lines(archive, 163, 164, 165) == [(163, "evasion"), (164, f"{work}/mnt"), (165, f"{work}/mnt")]
        assert "mount_changes=2 " in not_passing_because_paths(archive)
    else:
        assert lines(archive, 263, 264) == [(263, "evasion"), (264, f"{work}/mnt")]


@pytest.mark.parametrize("user", USERS)
def test_chroot(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "chroot", user)
    if user == "root":
        assert lines(archive, 168) == [(168, f"{work}/jail")]
        assert "processes=1 " in not_passing_because_paths(archive)
        assert "/notes.txt" in archive.values("openat")  # as the jailed process named it
    else:
        assert lines(archive, 268) == [(268, f"{work}/jail")]


@pytest.mark.parametrize("user", USERS)
def test_new_mount_api_alias_is_not_passing(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "new_mount_api", user)
    assert lines(archive, 169, 170, 171, 172) == [
        (169, f"{work}/home"), (170, f"{work}/home"), (171, f"{work}/doc"),  # open_tree's fd is its path
        (172, None), (170, None), (171, f"{work}/mnt")]  # a new filesystem has no host path
    note = not_passing_because_paths(archive)
    assert "processes=1 " in note and "mount_changes=3 " in note, note


@pytest.mark.parametrize("user", USERS)
def test_pivot_root(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "pivot_root", user)
    assert lines(archive, 166, 167) == [(166, f"{work}/home"), (167, f"{work}/home/old")]
    note = not_passing_because_paths(archive)
    assert "processes=1 " in note, note  # the child (its parent never moved)
    view = json.loads(assay("show", archive.path, "--json").stdout)
    assert [p["pid"] for p in view["processes"] if p["paths_not_host"]] == [2]
