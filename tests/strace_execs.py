"""strace as an independent witness of a run's commands: `strace -f -xx -v -s 65535` output -> ExecLog.

strace sees every execve with the filename and argv as passed, whether it
worked, each process's chdir calls and forks (for its cwd), and how each
process ended. The result goes through the same pure fold as the kernel's
records (blackbox.commandlog), so the two command logs can be compared
command for command.
"""

from __future__ import annotations

import errno
import os
import re
import signal
from pathlib import Path

from normalizer.execlog import ExecLog, ExecRecord, ExitStatus

STRACE = ("strace", "-f", "-q", "-xx", "-v", "-s", "65535",
          "-e", "trace=execve,chdir,fchdir,clone,clone3,fork,vfork")
_HEX = re.compile(r'"((?:\\x[0-9a-f]{2})*)"')
_LINE = re.compile(r"^(\d+)\s+(.*)$")
_RET = re.compile(r"\) += (-?\d+)(?: (E[A-Z0-9]+))?")
_START = re.compile(r"^(execve|chdir|fchdir|clone3?|v?fork)\(")
_RESUMED = re.compile(r"^<\.\.\. (execve|chdir|fchdir|clone3?|v?fork) resumed>")


def _unhex(s: str) -> bytes:
    return bytes.fromhex(s.replace("\\x", ""))


def parse(text: str, first_cwd: str) -> ExecLog:
    """The exec attempts and process ends an strace -f log records.

    A child's first line can come before its parent's fork returns in the
    log, so parents are collected first; a process starts in its parent's
    working directory as it is when the child first shows up.
    """
    parent = _parents(text)
    cwd: dict[int, str] = {}
    pending: dict[int, tuple[str, str]] = {}  # pid -> (syscall, text so far)
    execs: list[ExecRecord] = []
    exits: dict[int, ExitStatus] = {}
    order = 0
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        pid, rest = int(m.group(1)), m.group(2)
        if pid not in cwd:
            cwd[pid] = cwd.get(parent.get(pid, -1), first_cwd)
        if rest.startswith("+++ exited with "):
            exits[pid] = ExitStatus("exited", int(rest.split()[3]))
            continue
        if rest.startswith("+++ killed by "):
            exits[pid] = ExitStatus("signaled", int(signal.Signals[rest.split()[3]]))
            continue
        started, resumed = _START.match(rest), _RESUMED.match(rest)
        if started and rest.endswith("<unfinished ...>"):
            pending[pid] = (started.group(1), rest)
            continue
        if resumed:
            name, head = pending.pop(pid, (resumed.group(1), ""))
            rest = head.removesuffix("<unfinished ...>") + rest[resumed.end():]
        elif started:
            name = started.group(1)
        else:
            continue
        ret = _RET.search(rest)
        if ret is None:
            continue
        value, err = int(ret.group(1)), ret.group(2)
        if name == "chdir" and value == 0:
            target = os.fsdecode(_unhex(_HEX.findall(rest)[0]))
            cwd[pid] = os.path.normpath(os.path.join(cwd[pid], target))
        elif name == "execve":
            strings = _HEX.findall(rest[: rest.index("]")])
            path = os.fsdecode(_unhex(strings[0]))
            order += 1
            execs.append(ExecRecord(
                process=pid, thread_rank=0, order=order,
                path=os.path.normpath(os.path.join(cwd[pid], path)),
                argv=[_unhex(s) for s in strings[1:]],
                argv_complete=True, cwd=cwd[pid], result="success" if value == 0 else "error",
                errno=None if err is None else getattr(errno, err),
            ))
    return ExecLog(execs, exits)


def _parents(text: str) -> dict[int, int]:
    """child pid -> parent pid, from the return values of clone/clone3/fork/vfork."""
    out: dict[int, int] = {}
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        rest = m.group(2)
        call = _START.match(rest) or _RESUMED.match(rest)
        ret = _RET.search(rest) if call and call.group(1) in ("clone", "clone3", "fork", "vfork") else None
        if ret and int(ret.group(1)) > 0:
            out[int(ret.group(1))] = int(m.group(1))
    return out


def parse_file(path: Path, first_cwd: str) -> ExecLog:
    return parse(path.read_text(), first_cwd)
