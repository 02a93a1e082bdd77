"""Agent-controlled text made safe for a terminal: the one helper every human line goes through.

File names, exec paths, endpoints, tool names and ids come from the command
under observation. Printed raw, a newline in a name could fake a `health:`
line of the summary, and an escape sequence could rewrite the screen. So
every human-readable line (the run summary, `diff`, `determinism`,
`validate`, error lines and every log line) passes through `printable`,
which escapes every character Python does not call printable (Unicode
"Other" and "Separator" categories but the ASCII space: C0/C1 controls,
DEL, bidi and other format characters, line and paragraph separators):

- ASCII controls and DEL as `\\xHH`, the same as the v0 value rule
  (docs/artifacts.md, "Byte encoding"), so a value reads the same in the
  archive and on screen;
- an undecodable byte that Python carries as a surrogate as `\\xHH` too;
- other characters as `\\uHHHH` or `\\UHHHHHHHH`, which the v0 rule never
  produces.

Renderers build a list of lines and escape each line on its own, so the only
line breaks that reach the terminal are the renderer's.
"""

from __future__ import annotations

from collections.abc import Iterable

_SURROGATE_BYTES = range(0xDC80, 0xDD00)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x80:
        return f"\\x{code:02x}"
    if code in _SURROGATE_BYTES:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` with every non-printable character escaped (see the module docstring)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def printable_lines(lines: Iterable[str]) -> str:
    """Lines escaped one by one and joined with the renderer's own newlines."""
    return "\n".join(printable(line) for line in lines)


