"""Reading policy files and the shipped presets, with errors that point at a line.

Every problem is ONE line, `FILE:LINE: field PATH: problem` (or
`FILE:LINE: invalid TOML: ...` for syntax), because a policy is written by
hand and its author needs to know where to look. TOML syntax errors carry a
line from tomllib; type and key errors come from msgspec as a `$.a.b[1]`
path, and semantic errors (CIDR, ports, paths) from `model` as a key path;
both are located by `_KeyLines`, a small scanner over the (already parsed,
so valid) TOML text. Locating is best effort and never fails: it falls back
to the enclosing table's line, then line 1.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib.resources
import os
import pwd
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from policy.model import Loc, Policy, PolicyError, format_loc, normalize_path, validate_policy

T = TypeVar("T")
PRESETS = ("read-only", "workspace-write", "danger-full-access")


class PolicyFileError(ValueError):
    """A policy problem the user can act on: one line, with the exit code for it.

    The policy package sits below the runner, so it cannot raise the runner's
    own error type; the CLI maps these to the same one-line error output.
    """

    exit_code = 125


class PolicyInvalid(PolicyFileError):
    """The policy file was read but is not a valid policy (`policy check` exits 1)."""


class PolicyUnreadable(PolicyFileError):
    """The policy file cannot be read at all (`policy check` exits 2)."""


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; `name` defaults to the file's stem."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise PolicyUnreadable(f"cannot read policy file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise PolicyInvalid(f"{path}:{line}: invalid TOML: not UTF-8 (byte {exc.start})") from None
    policy = parse_policy(text, str(path))
    return policy if policy.name else msgspec.structs.replace(policy, name=Path(path).stem)


def preset_text(name: str) -> str:
    """The TOML of a shipped preset (`read-only`, `workspace-write`, `danger-full-access`)."""
    if name not in PRESETS:
        raise PolicyFileError(f"unknown sandbox {name!r}; expected one of: {', '.join(PRESETS)}")
    return (importlib.resources.files(__package__) / "presets" / f"{name}.toml").read_text("utf-8")


def load_preset(name: str) -> Policy:
    """A shipped preset: an ordinary policy file, validated like any other."""
    return parse_policy(preset_text(name), f"{name}.toml")


def parse_policy(text: str, filename: str) -> Policy:
    """Decode and validate policy TOML; PolicyInvalid carries the one-line, located error."""
    return decode_toml(text, filename, Policy, validate_policy)


def decode_toml(text: str, filename: str, root: type[T], validate: Callable[[T], None] | None = None) -> T:
    """TOML text as the strict msgspec Struct `root`, every problem one located line.

    The machinery of policy files, for any hand-written TOML with the same
    needs (the daemon's operator config): `validate` raises PolicyError with
    a key path for problems the types cannot express.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, problem = _toml_error(str(exc), text)
        raise PolicyInvalid(f"{filename}:{line}: invalid TOML: {problem}") from None
    try:
        value = msgspec.convert(data, root, strict=True)
        if validate is not None:
            validate(value)
    except msgspec.ValidationError as exc:
        loc, problem = _describe_validation(str(exc), data, root)
        raise PolicyInvalid(f"{filename}:{_line_of(text, loc)}: field {format_loc(loc)}: {problem}") from None
    except PolicyError as exc:
        raise PolicyInvalid(f"{filename}:{_line_of(text, exc.loc)}: {exc}") from None
    return value


def host_variables(workspace: str | Path, uid: int | None = None) -> dict[str, str]:
    """`resolve` keyword arguments for this host: workspace, home, tmpdir, all absolute.

    `home` is `uid`'s home from the password database when given (the
    command may run as another user than the runner, e.g. under sudo), else
    $HOME, else the current user's; `tmpdir` is $TMPDIR, else /tmp.
    """
    if uid is not None:
        home = pwd.getpwuid(uid).pw_dir
    else:
        home = os.environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
    tmpdir = os.environ.get("TMPDIR") or "/tmp"
    return {
        "workspace": normalize_path(os.path.abspath(workspace)),
        "home": normalize_path(os.path.abspath(home)),
        "tmpdir": normalize_path(os.path.abspath(tmpdir)),
    }


# --- error messages ----------------------------------------------------------------------------

_TOML_AT = re.compile(r"^(?P<msg>.*) \(at (?:line (?P<line>\d+), column (?P<col>\d+)|end of document)\)$")
_MSGSPEC_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>.*)`)?$")
_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_FIELD_IN = re.compile(r"`([^`]*)`")


def _toml_error(message: str, text: str) -> tuple[int, str]:
    """(line, problem) from tomllib's message; "end of document" is the last line."""
    match = _TOML_AT.match(message)
    if not match:
        return 1, message
    problem = match["msg"][:1].lower() + match["msg"][1:]
    if match["line"] is None:
        return max(text.count("\n") + (not text.endswith("\n")), 1), f"{problem} (at end of file)"
    return int(match["line"]), f"{problem} (column {match['col']})"


def _describe_validation(message: str, data: Any, root: type) -> tuple[Loc, str]:
    """msgspec's `Expected X, got Y - at $.a[0].b` as a key path and a problem in TOML's words."""
    match = _MSGSPEC_AT.match(message)
    raw, path = (match["msg"], match["path"] or "") if match else (message, "")
    loc: Loc = tuple(int(index) if index else name for name, index in _PATH_PART.findall(path))
    named = _FIELD_IN.search(raw)
    key = named[1] if named else "?"
    try:
        if raw.startswith("Object contains unknown field"):
            allowed = ", ".join(f.encode_name for f in _type_at(root, loc).fields)
            return (*loc, key), f"unknown key (expected one of: {allowed})"
        if raw.startswith("Object missing required field"):
            return (*loc, key), f"missing (expected {_describe_type(_type_at(root, (*loc, key)))})"
        if raw.startswith(("Expected", "Invalid enum value")):
            expected, got = _describe_type(_type_at(root, loc)), _describe_value(_value_at(data, loc))
            return loc, f"expected {expected}, got {got}"
    except Exception:  # best effort: msgspec's own words are still a good message
        pass
    return loc, raw[:1].lower() + raw[1:]


def _type_at(root: type, loc: Loc) -> Any:
    """The msgspec type info of the field at `loc` in a `root` Struct, optional-ness stripped."""
    info: Any = msgspec.inspect.type_info(root)
    for part in loc:
        info = _required(info)
        if isinstance(part, int):
            info = info.item_type
        else:
            info = next(f.type for f in info.fields if f.encode_name == part)
    return _required(info)


def _required(info: Any) -> Any:
    if isinstance(info, msgspec.inspect.UnionType):
        types = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        return types[0] if len(types) == 1 else msgspec.inspect.UnionType(tuple(types))
    return info


_TYPE_WORDS: dict[type, str] = {
    msgspec.inspect.StrType: "a string",
    msgspec.inspect.IntType: "an integer",
    msgspec.inspect.BoolType: "a boolean",
    msgspec.inspect.StructType: "a table",
}


def _describe_type(info: Any) -> str:
    inspect = msgspec.inspect
    if isinstance(info, inspect.LiteralType):
        values = [_describe_value(v) for v in info.values]
        return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"
    if isinstance(info, inspect.UnionType):
        return " or ".join(_describe_type(t) for t in info.types)
    if isinstance(info, inspect.VarTupleType | inspect.ListType):
        item = _describe_type(info.item_type).split(" ", 1)[-1]
        return f"an array of {item}s"
    return _TYPE_WORDS.get(type(info), "a value of another type")


def _describe_value(value: Any) -> str:
    if isinstance(value, str):
        return msgspec.json.encode(value).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    words: dict[type, str] = {list: "an array", dict: "a table"}
    return words.get(type(value), "a date/time")


def _value_at(data: Any, loc: Loc) -> Any:
    for part in loc:
        data = data[part]
    return data


# --- locating keys in TOML text ----------------------------------------------------------------


def _line_of(text: str, loc: Loc) -> int:
    """The line defining `loc`, else its closest enclosing key or table, else 1."""
    lines = _KeyLines(text).scan()
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


class _KeyLines:
    """Where each key, table and array element of a valid TOML document starts.

    Handles `[table]`, `[[array.of.tables]]`, dotted and quoted keys, inline
    tables, (multi-line) arrays, all string forms and comments: enough for a
    policy. `scan` returns what it found even if something surprises it.
    """

    _BARE = re.compile(r"[A-Za-z0-9_-]+")
    _SCALAR_END = re.compile(r"[,\]}\n#]")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.lines: dict[Loc, int] = {}
        self._starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def scan(self) -> dict[Loc, int]:
        with contextlib.suppress(Exception):  # a best-effort locator must never hide the real error
            self._document()
        return self.lines

    def _record(self, loc: Loc) -> None:
        self.lines.setdefault(loc, bisect.bisect_right(self._starts, self.pos))

    def _peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def _skip(self, newlines: bool) -> None:
        """Spaces, comments and (when allowed) line breaks."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t\r" or (newlines and c == "\n"):
                self.pos += 1
            elif c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def _document(self) -> None:
        table: Loc = ()
        counts: dict[Loc, int] = {}
        while True:
            self._skip(newlines=True)
            if self.pos >= len(self.text):
                return
            if self._peek() == "[":
                many = self._peek(2) == "[["
                self.pos += 2 if many else 1
                table = tuple(self._key())
                if many:
                    self._record(table)
                    counts[table] = counts.get(table, -1) + 1
                    table = (*table, counts[table])
                self._record(table)
                self.pos += 2 if many else 1
            else:
                self._pair(table)

    def _pair(self, table: Loc) -> None:
        start = self.pos
        key = self._key()
        for end in range(1, len(key) + 1):
            self._record((*table, *key[:end]))
        self._skip(newlines=False)
        if self._peek() != "=" or self.pos == start:
            raise ValueError("unexpected TOML")
        self.pos += 1
        self._value((*table, *key))

    def _key(self) -> list[str]:
        parts = []
        while True:
            self._skip(newlines=False)
            if self._peek() in ('"', "'"):
                parts.append(self._string())
            else:
                match = self._BARE.match(self.text, self.pos)
                if not match:
                    raise ValueError("unexpected TOML key")
                parts.append(match[0])
                self.pos = match.end()
            self._skip(newlines=False)
            if self._peek() != ".":
                return parts
            self.pos += 1

    def _value(self, loc: Loc) -> None:
        self._skip(newlines=False)
        self._record(loc)
        c = self._peek()
        if c == "{":
            self.pos += 1
            while True:
                self._skip(newlines=True)
                if self._peek() == "}":
                    self.pos += 1
                    return
                self._pair(loc)
                self._skip(newlines=True)
                if self._peek() == ",":
                    self.pos += 1
        elif c == "[":
            self.pos += 1
            index = 0
            while True:
                self._skip(newlines=True)
                if self._peek() == "]":
                    self.pos += 1
                    return
                self._value((*loc, index))
                self._skip(newlines=True)
                if self._peek() == ",":
                    self.pos += 1
                    index += 1
        elif c in ('"', "'"):
            self._string()
        else:
            match = self._SCALAR_END.search(self.text, self.pos)
            end = match.start() if match else len(self.text)
            if end == self.pos:
                raise ValueError("unexpected TOML value")
            self.pos = end

    def _string(self) -> str:
        """Skip a string of any form; returns its raw text (enough for quoted keys)."""
        quote = self._peek(3) if self._peek(3) in ('"""', "'''") else self._peek()
        self.pos += len(quote)
        start = self.pos
        while self.pos < len(self.text):
            if quote[0] == '"' and self.text[self.pos] == "\\":
                self.pos += 2
            elif self.text.startswith(quote, self.pos):
                raw = self.text[start:self.pos]
                self.pos += len(quote)
                return raw
            else:
                self.pos += 1
        raise ValueError("unterminated string")
