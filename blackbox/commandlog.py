"""From the kernel's exec records to the command log (pure).

Input: `normalizer.execlog.ExecLog` (every exec attempt with argv bytes, cwd,
result, and how each process ended). Output: `Command`s in the kernel
layer's canonical order, with two documented folds an auditor expects:

- a failed attempt followed, in the same process, by a successful exec of
  the same argv is a PATH search (execvp, a shell, Python's subprocess):
  one entry, `attempts` counting the tries;
- other failed attempts of one argv in a row are one entry with the last
  error and the attempt count.

Paths under the workspace are written relative to it with a `./` prefix
(`.` for the root), everything else stays absolute: kernel paths are always
absolute, so the prefix is unambiguous, and the log of a deterministic agent
is identical whichever run directory it ran in.
"""

from __future__ import annotations

import errno as errno_names
import signal
from collections.abc import Iterable
from dataclasses import replace

from blackbox.commands import Command
from normalizer.execlog import ExecLog, ExecRecord, ExitStatus


def arg_text(raw: bytes) -> str:
    """An argv entry as text: UTF-8 as is, any other byte as `\\xNN` (never raises)."""
    return raw.decode("utf-8", "backslashreplace")


def relative_to(path: str | None, root: str) -> str:
    """`./sub/path` for paths under the workspace `root`, `.` for it, others unchanged."""
    if path is None:
        return "unknown"
    root = root.rstrip("/")
    if path == root:
        return "."
    if path.startswith(root + "/"):
        return "./" + path[len(root) + 1:]
    return path


def exit_dict(status: ExitStatus | None) -> dict[str, object] | None:
    """How a process ended, with the signal's name when a signal ended it."""
    if status is None:
        return None
    if status.how == "signaled" and status.code is not None:
        try:
            name = signal.Signals(status.code).name
        except ValueError:
            name = f"SIG{status.code}"
        return {"how": "signaled", "signal": name, "code": status.code}
    if status.how == "exited":
        return {"how": "exited", "code": status.code}
    return {"how": "unknown"}


def _errno(n: int | None) -> str | None:
    return None if n is None else errno_names.errorcode.get(n, f"E{n}")


def _entry(rec: ExecRecord, workspace: str, attempts: int) -> Command:
    return Command(
        index=0, pid=rec.process, argv=tuple(arg_text(a) for a in rec.argv),
        argv_complete=rec.argv_complete, path=relative_to(rec.path, workspace),
        cwd=relative_to(rec.cwd, workspace), result=rec.result, errno=_errno(rec.errno),
        attempts=attempts,
    )


def _by_process(records: Iterable[ExecRecord]) -> dict[int, list[ExecRecord]]:
    groups: dict[int, list[ExecRecord]] = {}
    for rec in records:
        groups.setdefault(rec.process, []).append(rec)
    return groups


def _fold(records: list[ExecRecord], workspace: str) -> list[Command]:
    """One process's attempts, PATH searches and repeated failures folded."""
    out: list[Command] = []
    failed: list[ExecRecord] = []
    for rec in records:
        if failed and failed[-1].argv != rec.argv:
            out.append(_entry(failed[-1], workspace, len(failed)))
            failed = []
        if rec.result == "error":
            failed.append(rec)
            continue
        out.append(_entry(rec, workspace, len(failed) + 1))
        failed = []
    if failed:
        out.append(_entry(failed[-1], workspace, len(failed)))
    return out


def build_commands(log: ExecLog, workspace: str) -> list[Command]:
    """The command log: canonical order, 1-based indexes, each process's end on its last working image."""
    commands: list[Command] = []
    for pid, records in _by_process(log.execs).items():
        entries = _fold(records, workspace)
        successes = [n for n, e in enumerate(entries) if e.result == "success"]
        ended_at = successes[-1] if successes else len(entries) - 1
        for n, cmd in enumerate(entries):
            commands.append(replace(
                cmd, exit=exit_dict(log.exits.get(pid)) if n == ended_at else None,
                replaced_by_exec=cmd.result == "success" and n < ended_at,
            ))
    return [replace(c, index=i) for i, c in enumerate(commands, start=1)]
