"""Read `strace -f -y -s 4096` output as a witness of what a command did.

The kernel tests run strace inside the observed run and compare what it saw
with the kernel layer. `-y` makes strace print the path behind every fd
argument and result, so dirfd-relative paths are resolved by the kernel's own
account, not by ours.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from normalizer.fsops import FAILED

_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+)(?:<([^>]*)>)?")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|[^,]+')
_FD = re.compile(r"^(?:-?\d+|AT_FDCWD)<(.*)>$")
SETID = 0o6000
UTIMES_NOW, UTIMES_GIVEN = 174, 175
FORKS = ("clone", "clone3", "fork", "vfork")
DIRECTORY_CALLS = ("chdir", "fchdir", *FORKS)
"""What `calls` needs traced besides the calls a test compares, to know each process's directory."""


@dataclass(frozen=True)
class Call:
    """One complete syscall line: name, arguments as printed, result, result fd's path."""

    pid: int
    name: str
    args: list[str]
    ret: int
    ret_path: str | None
    cwd: str = ""
    """The process's directory at the call, where `calls` was told where the first one started."""

    def text(self, i: int) -> str:
        """Argument `i` as a string literal's content."""
        return self.args[i][1:-1].encode().decode("unicode_escape")

    def path(self, dirfd_arg: int | None, i: int) -> str:
        """Argument `i` as an absolute path, resolved against argument `dirfd_arg`."""
        text = self.text(i)
        if text.startswith("/") or dirfd_arg is None:
            return posixpath.normpath(posixpath.join(self.cwd, text))
        match = _FD.match(self.args[dirfd_arg])
        assert match, f"no fd path in {self.args[dirfd_arg]!r}: run strace with -y"
        return posixpath.normpath(posixpath.join(match.group(1), text))

    def fd_path(self, i: int) -> str:
        match = _FD.match(self.args[i])
        assert match, f"no fd path in {self.args[i]!r}: run strace with -y"
        return match.group(1)


def joined(path: Path) -> list[str]:
    """The output's lines as `PID CALL`, a call strace split around another process's
    (`<unfinished ...>`, then `<... name resumed>`) joined again at its end."""
    pending: dict[str, str] = {}
    out = []
    for line in path.read_text().splitlines():
        pid, _, rest = line.partition(" ")
        rest = rest.lstrip()
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest.removesuffix("<unfinished ...>").rstrip()
        elif rest.startswith("<... ") and "resumed>" in rest:
            out.append(f"{pid} {pending.pop(pid, '')}{rest.split('resumed>', 1)[1].lstrip()}")
        else:
            out.append(f"{pid} {rest}")
    return out


def calls(path: Path, start: str = "") -> list[Call]:
    """Every complete call of an strace output file (-f -qq -y).

    With `start` (the first process's directory; trace DIRECTORY_CALLS too), each call carries
    its process's directory, so a path a plain syscall (mkdir, unlink, ...) was given relative to
    it is made absolute as the kernel did. A child starts in its parent's directory; its first
    calls may come before the parent's clone returns, and the parent cannot move while inside
    clone, so it takes the parent's directory when first seen.
    """
    parsed = []
    for line in joined(path):
        match = _LINE.match(line)
        if match is None:
            continue
        pid, name, args, ret, ret_path = match.groups()
        parsed.append(Call(int(pid), name, [t.strip() for t in _TOKEN.findall(args)], int(ret), ret_path))
    if not start:
        return parsed
    parent = {c.ret: c.pid for c in parsed if c.name in FORKS and c.ret > 0}
    cwd: dict[int, str] = {}
    out = []
    for c in parsed:
        here = cwd.setdefault(c.pid, cwd.get(parent.get(c.pid, -1), start))
        c = replace(c, cwd=here)
        if c.name == "chdir" and c.ret == 0:
            cwd[c.pid] = c.path(None, 0)
        elif c.name == "fchdir" and c.ret == 0:
            cwd[c.pid] = c.fd_path(0)
        out.append(c)
    return out


def times(args: str) -> int:
    """The line a utimensat makes from its arguments after the path (`times`, flags): a NULL
    `times`, or UTIME_NOW twice, is "to now"."""
    return UTIMES_NOW if args.startswith("NULL") or args.count("UTIME_NOW") == 2 else UTIMES_GIVEN


def expected(call: Call) -> list[tuple[int, str | None]]:
    """The kernel lines strace's view of one call implies (before the +100 of a failure)."""
    n, p = call.name, call.path
    table: dict[str, Callable[[], list[tuple[int, str | None]]]] = {
        "mkdir": lambda: [(124, p(None, 0))],
        "mkdirat": lambda: [(124, p(0, 1))],
        "unlink": lambda: [(120, p(None, 0))],
        "rmdir": lambda: [(121, p(None, 0))],
        "unlinkat": lambda: [(121 if "AT_REMOVEDIR" in call.args[2] else 120, p(0, 1))],
        "rename": lambda: [(122, p(None, 0)), (123, p(None, 1))],
        "renameat": lambda: [(122, p(0, 1)), (123, p(2, 3))],
        "renameat2": lambda: [(122, p(0, 1)), (123, p(2, 3))],
        "link": lambda: [(127, p(None, 0)), (128, p(None, 1))],
        "linkat": lambda: [(127, p(0, 1)), (128, p(2, 3))],
        "symlink": lambda: [(125, p(None, 1)), (126, call.text(0))],
        "symlinkat": lambda: [(125, p(1, 2)), (126, call.text(0))],
        "mknod": lambda: [(132, p(None, 0))],
        "mknodat": lambda: [(132, p(0, 1))],
        "truncate": lambda: [(129, p(None, 0))],
        "chmod": lambda: [(131 if int(call.args[1], 8) & SETID else 130, p(None, 0))],
        "fchmodat": lambda: [(131 if int(call.args[2], 8) & SETID else 130, p(0, 1))],
        "fchmod": lambda: [(131 if int(call.args[1], 8) & SETID else 130, call.fd_path(0))],
        "utimensat": lambda: [(times(", ".join(call.args[2:])),
                               call.fd_path(0) if call.args[1] == "NULL" else p(0, 1))],
        "io_uring_setup": lambda: [(140, None)],
        "open_by_handle_at": lambda: [(141, None)],
    }
    if n == "execve":
        return [(101 - FAILED, p(None, 0))] if call.ret < 0 else []
    if n == "execveat":
        return [(101 - FAILED, p(0, 1))] if call.ret < 0 else []
    return table[n]()
