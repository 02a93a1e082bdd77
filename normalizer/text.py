"""Agent-controlled bytes (paths, argv, socket names) as v0 text: total, lossless, injective.

A file name is any byte string but NUL; a v0 value is a JSON string, so it
must be valid Unicode. The rule (docs/artifacts.md, "Byte encoding"):

- valid UTF-8 stays as it is, except the characters below;
- a byte that is not part of valid UTF-8 becomes `\\xHH` (two lowercase hex digits);
- control characters (C0 U+0000-U+001F, DEL U+007F, C1 U+0080-U+009F) become
  the `\\xHH` escapes of their UTF-8 bytes, so a value never carries a raw
  control character to a terminal or a log;
- the escape character itself, `\\`, becomes `\\\\`.

`unescape` inverts it (`unescape(escape_bytes(b)) == b` for every `b`), so
two different names never share a value. A value the kernel cut short ends
in `TRUNCATED`, which the rule itself can never produce (`\\` is followed only
by `\\` or `x`), so it cannot be mistaken for, or forged by, a name.
"""

from __future__ import annotations

import os
import re

TRUNCATED = "\\<truncated>"
"""Suffix of a value whose bytes the kernel cut at its capture limit."""

_NEEDS_ESCAPE = re.compile("[\x00-\x1f\x7f-\x9f\\\\\udc80-\udcff]")
_ESCAPE = re.compile(rb"\\(\\|x[0-9a-f]{2})")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    code = ord(char)
    if code >= 0xDC80:  # an undecodable byte, as surrogateescape carries it
        return f"\\x{code - 0xDC00:02x}"
    return "".join(f"\\x{b:02x}" for b in char.encode("utf-8"))


def escape_bytes(raw: bytes, truncated: bool = False) -> str:
    """The v0 text of `raw`; `truncated` appends the truncation marker."""
    text = raw.decode("utf-8", "surrogateescape")
    if _NEEDS_ESCAPE.search(text):
        text = _NEEDS_ESCAPE.sub(_escape_char, text)
    return text + TRUNCATED if truncated else text


def escape_os(name: str) -> str:
    """The v0 text of an OS string (a path or argv item Python decoded with surrogateescape)."""
    return escape_bytes(os.fsencode(name))


def os_path(value: str) -> str:
    """A v0 path value as the OS string Python uses for it (surrogateescape), to compare or open."""
    return os.fsdecode(unescape(value))


def unescape(text: str) -> bytes:
    """The bytes `escape_bytes` encoded (without the truncation marker, if any).

    Raises ValueError on text the rule cannot produce.
    """
    data = text.removesuffix(TRUNCATED).encode("utf-8")
    out = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(data):
        out += _plain(data[pos:match.start()])
        token = match.group(1)
        out += b"\\" if token == b"\\" else bytes([int(token[1:], 16)])
        pos = match.end()
    out += _plain(data[pos:])
    return bytes(out)


def _plain(chunk: bytes) -> bytes:
    if b"\\" in chunk:
        raise ValueError("a backslash that starts no escape: not a v0-encoded value")
    return chunk
