"""Secret redaction at the capture boundary, with Assay's canonical rule table.

Every string an archive member carries comes from the agent (paths,
endpoints, tool names, ids), so any of them may hold a credential. Before
anything is hashed, each such string goes through `Redactor.redact`, which
replaces every secret-shaped span with `<redacted:RULE:H8>`, exactly as
upstream does (crates/assay-runner-core/src/redact.rs:221-295 at the pinned
commit, see schema/upstream/README.md):

- the rules are `schema/upstream/secret-rules.v1.json`, vendored verbatim
  (the parity contract upstream's Rust and Python detectors share);
- one left-to-right scan: at each position the earliest match across all
  rules wins, the longer one on a tie, earlier rules first on equal spans;
  the scan resumes after the match, so placeholders are never re-scanned,
  and placeholders already in the input are copied through (idempotent);
- `H8` is the first 8 hex digits of HMAC-SHA256(key, matched text).

The key is fixed (`PLACEHOLDER_KEY`), not a per-installation secret as
upstream's: archives must be byte-identical across runs and rebuildable
from the spool on any machine (`assay-runner normalize`). The cost, stated
in docs/artifacts.md: whoever already holds a candidate secret can confirm
it is the one redacted (a 32-bit check); the value itself is not recoverable.

`find_unredacted` is the fail-closed sweep's test (redact.rs:297-311): the
first rule that still matches once placeholders are blanked out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections import Counter
from functools import cache
from pathlib import Path

RULES_FILE = Path(__file__).resolve().parent.parent / "schema" / "upstream" / "secret-rules.v1.json"
PLACEHOLDER = re.compile(r"<redacted:[a-z-]+:[0-9a-f]{8}>")  # redact.rs:314-320
PLACEHOLDER_KEY = b"assay-runner redaction v0"
MODE = "shape_only"
"""Upstream's name for shape rules without argv flag handling (redact.rs:24-46):
archives carry no argv, so the flag-aware pass has nothing to apply to."""


@cache
def rules() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The canonical table, compiled in its order (which decides ties)."""
    table = json.loads(RULES_FILE.read_bytes())
    return tuple((r["name"], re.compile(r["pattern"])) for r in table["rules"])


class Redactor:
    """Redacts strings for one run and counts what it replaced, per rule."""

    def __init__(self, key: bytes = PLACEHOLDER_KEY) -> None:
        self._key = key
        self.by_rule: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_rule.values())

    def _placeholder(self, rule: str, matched: str) -> str:
        mac = hmac.new(self._key, matched.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return f"<redacted:{rule}:{mac.hexdigest()[:8]}>"

    def redact(self, text: str) -> str:
        """`text` with every secret-shaped span replaced; unchanged text is returned as is."""
        keep = [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)]
        out: list[str] = []
        pos = 0
        while True:
            best: tuple[int, int, str] | None = None
            for name, pattern in rules():
                m = pattern.search(text, pos)
                if m and (best is None or (m.start(), -m.end()) < (best[0], -best[1])):
                    best = (m.start(), m.end(), name)
            if best is None:
                break
            start, end, name = best
            inside = next((e for s, e in keep if s <= start < e), None)
            if inside is not None:  # an existing placeholder: copy it through
                out.append(text[pos:inside])
                pos = inside
                continue
            if end == start:  # an empty match cannot be a secret; step over it
                out.append(text[pos : start + 1])
                pos = start + 1
                continue
            out += [text[pos:start], self._placeholder(name, text[start:end])]
            self.by_rule[name] += 1
            pos = end
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)

    def note(self) -> str:
        """The observation-health note that records the tally (value-free).

        Upstream's `redaction` block (crates/assay-runner-schema/src/health.rs:10-21)
        is not a field of our v0 contract, so its mode, count and per-rule counts
        are a code-prefixed note. A count is written `rule(n)`, not `rule=n`:
        `github-token=2` would itself match the credential-assignment rule.
        """
        parts = [f"redaction: mode={MODE} redacted_count={self.total}"]
        if self.by_rule:
            parts.append("by_rule=" + ",".join(f"{k}({v})" for k, v in sorted(self.by_rule.items())))
        return " ".join(parts)


def find_unredacted(text: str) -> str | None:
    """The first rule that still matches `text` outside placeholders, or None."""
    stripped = PLACEHOLDER.sub(" ", text)
    for name, pattern in rules():
        if pattern.search(stripped):
            return name
    return None
