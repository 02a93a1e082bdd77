"""Ordinary permission verdicts, checked as the command's user after the run.

A failed open that the policy also refuses is a policy block only if file
permissions would have let the user through: the kernel checks those first.
A forked child takes the user's credentials (no Landlock: it is the runner's
own process) and asks access(2). Files are checked as they are after the
run; a permission changed during the run can make a verdict stale, which
docs/policy.md says.
"""

from __future__ import annotations

import json
import os

from runner.capture.spawn import Credentials


def _allowed(access: str, path: str) -> bool:
    if access == "read":
        return os.access(path, os.R_OK)
    if os.path.lexists(path):
        return os.access(path, os.W_OK)
    return os.access(os.path.dirname(path) or "/", os.W_OK | os.X_OK)


def check_as(user: Credentials, questions: list[tuple[str, str]]) -> dict[str, bool]:
    """`{"<access>:<path>": allowed}` for each question, answered as `user`."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.close(read_fd)
            os.setgroups(list(user.groups))
            os.setresgid(user.gid, user.gid, user.gid)
            os.setresuid(user.uid, user.uid, user.uid)
            answers = {f"{a}:{p}": _allowed(a, p) for a, p in questions}
            os.write(write_fd, json.dumps(answers).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data) if data else {}
