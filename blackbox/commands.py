"""The command log: one entry per command the kernel saw, and what kind of command it was (pure).

An entry is a process image: the argv of its exec, the cwd at that moment,
whether the exec worked, and how the image ended (its process's exit code or
killing signal, or `replaced_by_exec` when the process exec'd again). Failed
exec attempts that a later exec of the same process superseded (a PATH
search) fold into the exec that worked; attempts that never led to a working
exec are one entry with the last error.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass

from blackbox.capture import apply_mode, apply_mode_argv

CATEGORIES = ("test_runner", "vcs", "package_manager", "build", "shell", "interpreter",
              "network", "file_ops", "other")

_TEST_TOOLS = frozenset({"pytest", "py.test", "tox", "nox", "jest", "vitest", "mocha", "ava", "rspec",
                         "phpunit", "ctest", "nosetests", "trial", "bats"})
_TEST_MODULES = frozenset({"pytest", "unittest", "nose2", "tox", "nox"})
_TEST_SUBCOMMANDS = {
    "npm": ("test", "t"), "yarn": ("test",), "pnpm": ("test",), "bun": ("test",), "deno": ("test",),
    "go": ("test",), "cargo": ("test", "nextest"), "make": ("test", "check"), "mvn": ("test", "verify"),
    "gradle": ("test", "check"), "dotnet": ("test",), "mix": ("test",), "swift": ("test",),
}
_BY_NAME = {
    "vcs": {"git", "hg", "svn", "gh"},
    "package_manager": {"pip", "pip3", "uv", "poetry", "npm", "npx", "yarn", "pnpm", "apt", "apt-get",
                        "brew", "gem", "bundle", "composer", "conda"},
    "build": {"make", "cmake", "ninja", "gcc", "cc", "g++", "clang", "ld", "cargo", "go", "rustc",
              "javac", "mvn", "gradle", "tsc", "dotnet"},
    "shell": {"sh", "bash", "dash", "zsh", "fish", "ksh", "busybox"},
    "interpreter": {"node", "deno", "bun", "ruby", "perl", "php", "java", "env"},
    "network": {"curl", "wget", "ssh", "scp", "rsync", "nc", "ncat", "ftp", "telnet"},
    "file_ops": {"cat", "ls", "cp", "mv", "rm", "mkdir", "rmdir", "touch", "chmod", "chown", "ln",
                 "find", "grep", "rg", "sed", "awk", "head", "tail", "sort", "wc", "tee", "diff",
                 "tar", "gzip", "echo", "printf", "stat", "readlink", "realpath", "dirname",
                 "basename", "true", "false", "test"},
}
_SCRIPT_RUNNERS = frozenset({"node", "ruby", "perl", "php", "bun", "deno"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


@dataclass(frozen=True)
class Command:
    """One command of the log, as observed (raw argv; the capture mode applies on output).

    `result` is the exec's: `success`, `error` (with `errno`, e.g. ENOENT) or
    `unknown`; `exit` is how the process ended, on its last entry only
    (`{"how": "exited", "code": N}`, `{"how": "signaled", "signal": NAME,
    "code": N}` or `{"how": "unknown"}`; null while it still ran when the
    capture ended); `replaced_by_exec` marks an image the process replaced.
    """

    index: int
    pid: int
    argv: tuple[str, ...]
    argv_complete: bool
    path: str
    cwd: str
    result: str
    errno: str | None = None
    attempts: int = 1
    exit: dict[str, object] | None = None
    replaced_by_exec: bool = False

    @property
    def category(self) -> str:
        return categorize(self.argv, self.path)

    @property
    def exit_code(self) -> int | None:
        """The exit code when the process exited normally, else None."""
        if self.exit and self.exit.get("how") == "exited":
            code = self.exit.get("code")
            return code if isinstance(code, int) else None
        return None

    def outcome(self) -> str:
        """A short, value-free description of how the command ended (for evidence)."""
        if self.result != "success":
            return f"exec {self.result}" + (f" {self.errno}" if self.errno else "")
        if self.replaced_by_exec:
            return "replaced by exec"
        if not self.exit:
            return "still running at capture end"
        if self.exit.get("how") == "exited":
            return f"exit {self.exit.get('code')}"
        if self.exit.get("how") == "signaled":
            return f"signal {self.exit.get('signal')}"
        return "end unknown"

    def as_line(self, mode: str) -> dict[str, object]:
        """The command_logs.jsonl line, strings shown by the capture mode."""
        line = asdict(self)
        line["argv"] = apply_mode_argv(list(self.argv), mode)
        if mode != "full":  # paths are not request text, but may still hold a secret
            line["path"] = apply_mode(self.path, "redacted")
            line["cwd"] = apply_mode(self.cwd, "redacted")
        line["category"] = self.category
        return line


def _name(arg: str) -> str:
    return os.path.basename(arg)


def is_test_run(argv: tuple[str, ...] | list[str]) -> bool:
    """Does this argv run a test suite? (pytest, python -m pytest, npm test, go test, ...)."""
    if not argv:
        return False
    name = _name(argv[0])
    args = list(argv[1:])
    if name in _TEST_TOOLS:
        return True
    script = next((a for a in args if not a.startswith("-")), "")
    if (_PYTHON.match(name) or name in _SCRIPT_RUNNERS) and _name(script) in _TEST_TOOLS:
        return True  # an interpreter given the test tool's script: node .bin/jest, python3 /usr/bin/pytest
    if _PYTHON.match(name):
        module = args[args.index("-m") + 1] if "-m" in args[:-1] else None
        return module in _TEST_MODULES
    if name in _TEST_SUBCOMMANDS:
        words = [a for a in args if not a.startswith("-")]
        if name in ("npm", "yarn", "pnpm", "bun") and words[:1] == ["run"]:
            words = words[1:]
        return bool(words) and words[0] in _TEST_SUBCOMMANDS[name]
    return False


def categorize(argv: tuple[str, ...] | list[str], filename: str = "") -> str:
    """One category per command, test runners first (they drive quality.tests_required)."""
    if is_test_run(argv):
        return "test_runner"
    name = _name(argv[0]) if argv else _name(filename)
    if _PYTHON.match(name):
        return "interpreter"
    for category, names in _BY_NAME.items():
        if name in names:
            return category
    return "other"


def categories_seen(commands: list[Command]) -> dict[str, int]:
    """Category -> count, in the fixed category order (stable output)."""
    counts = {c: 0 for c in CATEGORIES}
    for cmd in commands:
        counts[cmd.category] += 1
    return {c: n for c, n in counts.items() if n}
