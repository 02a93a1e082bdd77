"""Evasion corpus: the rest of the change surface, as root and as `nobody`.

Owners, times (backdating), xattrs (a hostile name stays lossless), unix
socket binds, device/fifo nodes and a program run from a memfd: each must be
a kernel line naming what it changed (normalizer/nsops.py has the ids).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ebpf.monitor import optional_syscalls
from tests.evasion_support import USERS, evade, lines, work
from tests.support import assay

pytestmark = pytest.mark.kernel
__all__ = ["work"]


@pytest.mark.parametrize("user", USERS)
def test_chown_family(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "chown", user)
    assert lines(archive, 173) == [(173, f"{work}/owned")] * 4  # chown, lchown, fchownat, fchown


@pytest.mark.parametrize("user", USERS)
def test_backdating_is_told_apart_from_touch(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "utimes", user)
    path = f"{work}/dated"
    assert lines(archive, 174, 175) == [(174, path), (175, path), (175, path)]


@pytest.mark.parametrize("user", USERS)
def test_xattrs_set_and_removed_with_lossless_names(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "xattrs", user)
    path = f"{work}/tagged"
    at = [(176, path), (177, "user.at"), (178, path), (179, "user.at")] \
        if "setxattrat" in optional_syscalls() else []
    assert lines(archive, 176, 177, 178, 179) == [
        (176, path), (177, "user.evil\\x01name"), (176, path), (177, "user.byfd"),
        (178, path), (179, "user.evil\\x01name"), *at]
    assert assay("validate", archive.path).returncode == 0


@pytest.mark.parametrize("user", USERS)
def test_unix_socket_binds(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "unix_bind", user)
    assert lines(archive, 180) == [(180, f"unix:{work}/sock"), (180, "unix:@evasion-abstract")]


@pytest.mark.parametrize("user", USERS)
def test_mknod(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "mknod", user)
    assert lines(archive, 132) == [(132, f"{work}/fifo")]


@pytest.mark.parametrize("user", USERS)
def test_memfd_exec_names_the_memfd(tmp_path: Path, work: Path, user: str) -> None:
    archive = evade(tmp_path, work, "memfd_exec", user)
    assert lines(archive, 181) == [(181, "memfd:payload")]
    assert "memfd:payload" in archive.values("exec")
    assert not [v for v in archive.values("exec") if v and v.startswith("/dev/fd/")]
