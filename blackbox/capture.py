"""Capture modes: how request text and argv appear in events.jsonl and command_logs.jsonl.

- `full`: verbatim.
- `redacted`: every secret-shaped substring replaced by the secret-rule
  redactor (one call, `redact_secrets`), the rest kept.
- `hashed`: each string replaced by `sha256:<hex>` of its UTF-8 bytes, so two
  runs can still be compared without the text being stored.

The evaluation works on the raw values before the mode is applied; findings
cite artifacts by line and index, never by excerpt, so no mode leaks text
through evidence.
"""

from __future__ import annotations

import hashlib

from blackbox.redact import redact_secrets


def sha256_ref(data: bytes) -> str:
    """The contract's hash reference form."""
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def apply_mode(text: str, mode: str) -> str:
    """One string as the capture mode shows it."""
    if mode == "full":
        return text
    if mode == "redacted":
        return redact_secrets(text)[0]
    if mode == "hashed":
        return sha256_ref(text.encode("utf-8", "surrogateescape"))
    raise ValueError(f"unknown capture mode {mode!r}")


def apply_mode_argv(argv: list[str], mode: str) -> list[str]:
    """Each argument on its own, so argument boundaries survive every mode."""
    return [apply_mode(arg, mode) for arg in argv]


def count_secrets(texts: list[str]) -> int:
    """How many secret-shaped substrings the redactor finds (the tally events carry)."""
    return sum(redact_secrets(t)[1] for t in texts)
