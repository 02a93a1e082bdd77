"""Read `strace -f -y -s 4096` output as a witness of what a command did.

The kernel tests run strace inside the observed run and compare what it saw
with the kernel layer. `-y` makes strace print the path behind every fd
argument and result, so dirfd-relative paths are resolved by the kernel's own
account, not by ours.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+)(?:<([^>]*)>)?")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|[^,]+')
_FD = re.compile(r"^-?\d+<(.*)>$")


@dataclass(frozen=True)
class Call:
    """One complete syscall line: name, arguments as printed, result, result fd's path."""

    pid: int
    name: str
    args: list[str]
    ret: int
    ret_path: str | None

    def text(self, i: int) -> str:
        """Argument `i` as a string literal's content."""
        return self.args[i][1:-1].encode().decode("unicode_escape")

    def path(self, dirfd_arg: int | None, i: int) -> str:
        """Argument `i` as an absolute path, resolved against argument `dirfd_arg`."""
        text = self.text(i)
        if text.startswith("/") or dirfd_arg is None:
            return posixpath.normpath(text)
        match = _FD.match(self.args[dirfd_arg])
        assert match, f"no fd path in {self.args[dirfd_arg]!r}: run strace with -y"
        return posixpath.normpath(posixpath.join(match.group(1), text))

    def fd_path(self, i: int) -> str:
        match = _FD.match(self.args[i])
        assert match, f"no fd path in {self.args[i]!r}: run strace with -y"
        return match.group(1)


def calls(path: Path) -> list[Call]:
    """Every complete line of an strace output file (-f -qq -y)."""
    out = []
    for line in path.read_text().splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        pid, name, args, ret, ret_path = match.groups()
        tokens = [t.strip() for t in _TOKEN.findall(args)]
        out.append(Call(int(pid), name, tokens, int(ret), ret_path))
    return out
