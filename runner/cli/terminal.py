"""Text printed to a terminal that came from the agent or from a file it wrote.

A file name or an events.jsonl value can hold escape sequences that clear the
screen, retitle the window or fake a line of output; printed raw, they act.
"""

from __future__ import annotations


def terminal_safe(text: str) -> str:
    """`text` with every non-printable character escaped (`\\xNN`, `\\uNNNN`)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)
