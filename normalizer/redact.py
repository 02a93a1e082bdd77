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


NEEDLES: dict[tuple[str, str], tuple[bool, tuple[str, ...]]] = {
    ("aws-access-key-id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"): (False, ("AKIA", "ASIA")),
    ("github-token", r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"): (False, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    ("openai-key", r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}\b"): (False, ("sk-",)),
    ("slack-token", r"\bxox[baprs]-[A-Za-z0-9-]{10,}\b"): (False, ("xox",)),
    ("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}\b"): (False, ("AIza",)),
    ("stripe-key", r"\b[sp]k_(?:live|test)_[0-9A-Za-z]{16,}\b"): (False, ("k_live_", "k_test_")),
    ("private-key-pem", r"-----BEGIN (?:[A-Z ]*)PRIVATE KEY-----"): (False, ("-----BEGIN ",)),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"): (False, ("eyJ",)),
    ("bearer-token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*"): (True, ("bearer",)),
    ("sensitive-query-param",
     r"""(?i)\b(?:access[_-]?token|refresh[_-]?token|sig|signature)=[^&\s#"']{6,}"""): (False, ("=",)),
    ("credential-assignment",
     r"""(?i)\b(?:api[_-]?key|secret|token|password|passwd|access[_-]?key|client[_-]?secret)\b\s*[=:]\s*[^\s'"]{6,}"""):
        (True, ("key", "secret", "token", "passw")),
}
"""(rule, its exact pattern) -> (compare case-folded?, literals one of which every match contains).

A rule runs only on text holding one of its literals: a regex scan costs
about 25 MB/s per rule, a substring test is far cheaper, and most text holds
none. Keyed by the pattern too, so a changed rule runs unfiltered. For the
case-insensitive rules the literals avoid `i`, the one ASCII letter whose
regex case-match (U+0131, dotless i) `str.casefold` does not map back; the
Kelvin sign (U+212A) and long s (U+017F) casefold to `k` and `s`."""


@cache
def _any_literal() -> re.Pattern[str] | None:
    """One pattern for every rule's literals (case-insensitive ones case-insensitively), or None
    when a rule has none: most text holds no literal, and then one scan rules out every rule."""
    parts = []
    for name, pattern in rules():
        needles = NEEDLES.get((name, pattern.pattern))
        if needles is None:
            return None
        fold, literals = needles
        alternatives = "|".join(map(re.escape, literals))
        parts.append(f"(?i:{alternatives})" if fold else alternatives)
    return re.compile("|".join(parts))


def _candidates(text: str) -> list[tuple[str, re.Pattern[str]]]:
    """The rules that could match `text` (in table order)."""
    any_literal = _any_literal()
    if any_literal is not None and not any_literal.search(text):
        return []
    folded: str | None = None
    out = []
    for name, pattern in rules():
        needles = NEEDLES.get((name, pattern.pattern))
        if needles is not None:
            fold, literals = needles
            if fold and folded is None:
                folded = text.casefold()
            haystack = folded if fold else text
            if not any(literal in haystack for literal in literals):  # type: ignore[operator]
                continue
        out.append((name, pattern))
    return out


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
        candidates = _candidates(text)
        if not candidates:
            return text
        keep = [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)]
        out: list[str] = []
        pos = 0
        while True:
            best: tuple[int, int, str] | None = None
            for name, pattern in candidates:
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
    for name, pattern in _candidates(stripped):
        if pattern.search(stripped):
            return name
    return None
