"""Whom the command runs as (runner/enforce/identity.py): never root unless asked."""

from __future__ import annotations

import pwd

import pytest

from runner.enforce import identity
from runner.enforce.identity import command_credentials, identity_env
from runner.errors import RunnerError

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity.os, "geteuid", lambda: 0)


def test_sudo_drops_to_the_invoking_user(as_root) -> None:
    env = {"SUDO_UID": str(NOBODY.pw_uid), "SUDO_GID": str(NOBODY.pw_gid)}
    user = command_credentials(None, env)
    assert user is not None
    assert (user.uid, user.gid) == (NOBODY.pw_uid, NOBODY.pw_gid)
    assert NOBODY.pw_gid in user.groups
    assert identity_env(user) == {"HOME": NOBODY.pw_dir, "USER": "nobody", "LOGNAME": "nobody"}


def test_explicit_user_wins_over_sudo(as_root) -> None:
    root = command_credentials("root", {"SUDO_UID": str(NOBODY.pw_uid), "SUDO_GID": "0"})
    assert root is not None and root.uid == 0


def test_without_sudo_the_runner_keeps_its_credentials(as_root) -> None:
    assert command_credentials(None, {}) is None
    assert identity_env(None) == {}


def test_sudo_vars_of_a_non_root_runner_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity.os, "geteuid", lambda: 1000)
    assert command_credentials(None, {"SUDO_UID": "1000", "SUDO_GID": "1000"}) is None


def test_a_sudo_uid_without_a_passwd_entry_keeps_only_its_gid(as_root) -> None:
    uid = next(u for u in range(70000, 80000) if not _exists(u))
    user = command_credentials(None, {"SUDO_UID": str(uid), "SUDO_GID": str(uid)})
    assert user is not None and (user.uid, user.groups) == (uid, (uid,))
    assert identity_env(user) == {}


@pytest.mark.parametrize("env", [{"SUDO_UID": "x", "SUDO_GID": "0"}, {"SUDO_UID": "1000"}])
def test_malformed_sudo_ids_are_one_line(as_root, env: dict[str, str]) -> None:
    with pytest.raises(RunnerError, match="not numeric ids"):
        command_credentials(None, env)


def _exists(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


