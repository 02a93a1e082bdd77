"""The one call through which black-box output is redacted: the runner's secret-rule redactor.

Capture mode `redacted` (and the paths of every non-`full` mode) go through
`normalizer.redact.Redactor`, the same canonical rule table and placeholder
form (`<redacted:RULE:H8>`) the v0 archive uses, so a secret is spelled the
same way in events.jsonl, command_logs.jsonl and the archive.
"""

from __future__ import annotations

from normalizer.redact import Redactor


def redact_secrets(text: str) -> tuple[str, int]:
    """`text` with every secret-shaped span replaced, and how many were replaced."""
    redactor = Redactor()
    return redactor.redact(text), redactor.total
