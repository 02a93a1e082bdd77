"""The fail-closed secret sweep, as Assay runs it before writing an archive.

crates/assay-runner-core/src/archive.rs:202-214 with redact.rs:297-311: no
member may still match a rule of schema/upstream/secret-rules.v1.json once
the `<redacted:RULE:H8>` placeholders are blanked out. The sweep never
rewrites; a hit means a string reached a member without passing the
redactor.
"""

from __future__ import annotations

from collections.abc import Iterator

from normalizer.redact import PLACEHOLDER, find_unredacted, rules
from runner.evidence.conformance.base import Problem


def secret_problems(name: str, data: bytes) -> Iterator[Problem]:
    """One problem per rule that still matches `name`'s bytes (NDJSON: at its first line)."""
    text = PLACEHOLDER.sub(" ", data.decode("utf-8", "replace"))
    if find_unredacted(text) is None:
        return
    for rule, pattern in rules():
        m = pattern.search(text)
        if m:
            line = text.count("\n", 0, m.start()) + 1 if name.endswith(".ndjson") else None
            yield Problem(name, f"unredacted {rule}-shaped value: refused by Assay's fail-closed sweep", line)
