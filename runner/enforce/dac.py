"""Ordinary permission verdicts, asked as the command's user.

A failed open that the policy also refuses is a policy block only if file
permissions would have let the user through: the kernel checks those first.
A forked child takes the user's credentials (no Landlock: it is the runner's
own process) and asks access(2), which also honours ACLs and group
membership exactly as the kernel will for the command. Files are checked as
they are after the run; a permission changed during the run can make a
verdict stale, which docs/policy.md says. The same question, asked before
the run, tells whether the command could write `--out` (runner/enforce/outguard.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from normalizer.text import os_path
from runner.enforce.identity import Credentials


def _allowed(access: str, value: str) -> bool:
    path = os_path(value)
    if access == "read":
        return os.access(path, os.R_OK)
    if os.path.lexists(path):
        return os.access(path, os.W_OK)
    return os.access(os.path.dirname(path) or "/", os.W_OK | os.X_OK)


def ask_as(user: Credentials, question: Callable[[], dict[str, bool]]) -> dict[str, bool]:
    """`question()` evaluated in a child holding `user`'s credentials (uid, gid, groups)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.close(read_fd)
            os.setgroups(list(user.groups))
            os.setresgid(user.gid, user.gid, user.gid)
            os.setresuid(user.uid, user.uid, user.uid)
            os.write(write_fd, json.dumps(question()).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data) if data else {}


def check_as(user: Credentials, questions: list[tuple[str, str]]) -> dict[str, bool]:
    """`{"<access>:<path>": allowed}` for each question (paths are v0 values), answered as `user`."""
    return ask_as(user, lambda: {f"{a}:{p}": _allowed(a, p) for a, p in questions})
