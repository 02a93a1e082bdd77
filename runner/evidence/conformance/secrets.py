"""The fail-closed secret sweep, as Assay runs it before writing an archive.

crates/assay-runner-core/src/archive.rs:202-214 with redact.rs:297-311: no
member may still match a rule of normalizer/upstream/secret-rules.v1.json once
the `<redacted:RULE:H8>` placeholders are blanked out. The sweep never
rewrites; a hit means a string reached a member without passing the
redactor.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain

from normalizer.redact import PLACEHOLDER, find_unredacted, find_unredacted_bytes, rules
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


def secret_problems_in_blocks(name: str, blocks: Iterable[tuple[int, bytes | None]]) -> Iterator[Problem]:
    """`secret_problems` for an NDJSON member too large to hold, swept one block of lines at a time.

    `blocks` are (number of the first line, whole lines) as
    `bounded.iter_line_blocks` gives them; an over-long line (None) is a
    validation problem already and is skipped. The report is the same (each
    rule once, at its first line, in the table's order); memory stays at one block.
    """
    first: dict[str, int] = {}
    for number, block in blocks:
        if block is None or find_unredacted_bytes(block) is None:  # cleared at memory speed, mostly
            continue
        text = PLACEHOLDER.sub(" ", block.decode("utf-8", "replace"))
        for rule, pattern in rules():
            m = pattern.search(text) if rule not in first else None
            if m:
                first[rule] = number + text.count("\n", 0, m.start())
    for rule, _ in rules():
        if rule in first:
            yield Problem(name, f"unredacted {rule}-shaped value: refused by Assay's fail-closed sweep",
                          first[rule])


SWEEP_SPAN_BYTES = 4 << 20
"""The longest stretch without a `"` a streamed document's sweep holds (one JSON string: a path is
at most a few KiB)."""


def secret_problems_in_document(name: str, chunks: Iterable[bytes]) -> Iterator[Problem]:
    """`secret_problems` for a JSON document too large to hold, swept a window at a time.

    No rule can match across a `"` (their classes leave it out, and compact JSON
    has no whitespace outside strings), so windows are cut at the last `"` of
    what has been read: every match lies inside one window, and the report is
    the whole document's. A stretch without a `"` longer than `SWEEP_SPAN_BYTES`
    is a problem itself, never a gap in the sweep (fail closed).
    """
    found: set[str] = set()
    carry = b""
    for chunk in chain(chunks, (None,)):
        if chunk is None:
            window, carry = carry, b""
        else:
            buffer = carry + chunk
            cut = max(buffer.rfind(b'"'), 0)
            window, carry = buffer[:cut], buffer[cut:]
            if len(carry) > SWEEP_SPAN_BYTES:
                yield Problem(name, f"more than {SWEEP_SPAN_BYTES} bytes without a '\"': too long a "
                              "string for the secret sweep to hold")
                return
        if find_unredacted_bytes(window) is None:
            continue
        text = PLACEHOLDER.sub(" ", window.decode("utf-8", "replace"))
        found.update(rule for rule, pattern in rules() if rule not in found and pattern.search(text))
    for rule, _ in rules():
        if rule in found:
            yield Problem(name, f"unredacted {rule}-shaped value: refused by Assay's fail-closed sweep")
