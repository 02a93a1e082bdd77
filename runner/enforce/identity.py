"""Who the command runs as: never root unless asked.

- `--user USER` (a name or uid) runs it as USER; `--user root` is the way
  to run it as root on purpose.
- Without `--user`, under sudo (the runner's euid is 0 and `SUDO_UID` is
  set), the command drops to the invoking user: `SUDO_UID`, `SUDO_GID` and
  that user's supplementary groups. `sudo assay-runner run -- agent` so
  gives the agent the caller's rights, not root's.
- Otherwise it keeps the runner's own credentials (a root login or CI job
  that did not go through sudo runs the command as root; pass `--user`).

A command dropped to a user also gets that user's HOME, USER and LOGNAME
(sudo sets them to root's): a program must not believe it is root, or
write its files into root's home.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass

from runner.errors import RunnerError


@dataclass(frozen=True)
class Credentials:
    """Who the command runs as when it must not run as root.

    Here rather than with the spawn code, so the daemon client (which only
    names its caller) does not load the capture side.
    """

    uid: int
    gid: int
    groups: tuple[int, ...]


def _groups(name: str | None, gid: int) -> tuple[int, ...]:
    return tuple(sorted(set(os.getgrouplist(name, gid)))) if name else (gid,)


def named_user(user: str) -> Credentials:
    """The uid, gid and groups of `--user` (a name or a numeric uid)."""
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        raise RunnerError(f"--user {user}: no such user on this machine") from None
    return Credentials(uid=entry.pw_uid, gid=entry.pw_gid, groups=_groups(entry.pw_name, entry.pw_gid))


def sudo_user(env: Mapping[str, str]) -> Credentials | None:
    """The invoking user when the runner runs as root under sudo, else None."""
    uid, gid = env.get("SUDO_UID", ""), env.get("SUDO_GID", "")
    if os.geteuid() != 0 or not uid:
        return None
    if not uid.isdigit() or not gid.isdigit():
        raise RunnerError(f"SUDO_UID={uid!r} SUDO_GID={gid!r} are not numeric ids: "
                          "unset them, or pass --user")
    try:
        name: str | None = pwd.getpwuid(int(uid)).pw_name
    except KeyError:
        name = None
    return Credentials(uid=int(uid), gid=int(gid), groups=_groups(name, int(gid)))


def command_credentials(user: str | None, env: Mapping[str, str]) -> Credentials | None:
    """Whom to drop the command to (None: keep the runner's own credentials)."""
    return named_user(user) if user is not None else sudo_user(env)


def identity_env(user: Credentials | None) -> dict[str, str]:
    """HOME, USER and LOGNAME of the user the command drops to (nothing to change when it does not)."""
    if user is None:
        return {}
    try:
        entry = pwd.getpwuid(user.uid)
    except KeyError:
        return {}
    return {"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name}


def effective(user: Credentials | None) -> Credentials:
    """The credentials the command will hold (the runner's own when `user` is None)."""
    if user is not None:
        return user
    return Credentials(uid=os.geteuid(), gid=os.getegid(), groups=tuple(sorted(set(os.getgroups()))))
