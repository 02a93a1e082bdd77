"""Make agent-controlled strings safe to print on a terminal.

Paths, argv, endpoints and tool names come from the observed command, which
is hostile input: a file name can hold an ANSI escape that clears the
reviewer's screen or a bidi override that reverses what they read. Every
such string goes through `printable` before it reaches a terminal; the HTML
report escapes the result once more for HTML (runner/review/html.py).
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the Unicode format characters that
# reorder or hide text (bidi embeddings/overrides/isolates, zero-width
# joiners, line/paragraph separators, BOM).
_UNSAFE = re.compile(
    "[\\\\\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)
_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control or text-reordering character shown as an escape.

    A backslash is doubled, so the result is unambiguous: `\\x1b` in the
    output can only come from a real ESC byte.
    """
    return _UNSAFE.sub(_escape, text)
