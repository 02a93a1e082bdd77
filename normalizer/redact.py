"""Secret redaction at the capture boundary, with Assay's canonical rule table.

Every string an archive member carries comes from the agent (paths,
endpoints, tool names, ids), so any of them may hold a credential. Before
anything is hashed, each such string goes through `Redactor.redact`, which
replaces every secret-shaped span with `<redacted:RULE:H8>`, exactly as
upstream does (crates/assay-runner-core/src/redact.rs:221-295 at the pinned
commit, see normalizer/upstream/README.md):

- the rules are `normalizer/upstream/secret-rules.v1.json`, vendored verbatim
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
import importlib.resources
import io
import json
import re
from collections import Counter
from functools import cache

from normalizer import accel

RULES_FILE = importlib.resources.files("normalizer") / "upstream" / "secret-rules.v1.json"
"""Package data (pyproject.toml), so a wheel install finds it as the checkout does."""
PLACEHOLDER = re.compile(r"<redacted:[a-z-]+:[0-9a-f]{8}>")  # redact.rs:314-320
PLACEHOLDER_KEY = b"assay-runner redaction v0"
MODE = "shape_only"
"""Upstream's name for shape rules without argv flag handling (redact.rs:24-46):
archives carry no argv, so the flag-aware pass has nothing to apply to."""


EMBEDDED = frozenset({"aws-access-key-id", "github-token", "slack-token", "google-api-key", "stripe-key",
                      "jwt"})
"""Rules whose shape is caught after a word character too (`x_ghp_...`, `xAKIA...`, `tok_eyJ...`):
upstream's leading `\b` lets a token glued to a name or a prefix through. Their prefixes are
distinctive enough to stand alone; `sk-`, `bearer` and the assignment rules keep the boundary
(`task-...`, `disk-...` would be false positives)."""


def _widen(name: str, pattern: str) -> str:
    """`pattern` without its leading word boundary for an `EMBEDDED` rule (else as upstream wrote it)."""
    return pattern.removeprefix(r"\b") if name in EMBEDDED else pattern


@cache
def rules() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The canonical table, compiled in its order (which decides ties), `EMBEDDED` rules widened."""
    table = json.loads(RULES_FILE.read_bytes())
    return tuple((r["name"], re.compile(_widen(r["name"], r["pattern"]))) for r in table["rules"])


NEEDLES: dict[tuple[str, str], tuple[bool, tuple[str, ...]]] = {
    ("aws-access-key-id", r"(?:AKIA|ASIA)[0-9A-Z]{16}\b"): (False, ("AKIA", "ASIA")),
    ("github-token", r"gh[pousr]_[A-Za-z0-9]{36,}\b"): (False, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    ("openai-key", r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}\b"): (False, ("sk-",)),
    ("slack-token", r"xox[baprs]-[A-Za-z0-9-]{10,}\b"): (False, ("xox",)),
    ("google-api-key", r"AIza[0-9A-Za-z_-]{35}\b"): (False, ("AIza",)),
    ("stripe-key", r"[sp]k_(?:live|test)_[0-9A-Za-z]{16,}\b"): (False, ("k_live_", "k_test_")),
    ("private-key-pem", r"-----BEGIN (?:[A-Z ]*)PRIVATE KEY-----"): (False, ("-----BEGIN ",)),
    ("jwt", r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"): (False, ("eyJ",)),
    ("bearer-token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*"): (True, ("bearer",)),
    ("sensitive-query-param",
     r"""(?i)\b(?:access[_-]?token|refresh[_-]?token|sig|signature)=[^&\s#"']{6,}"""): (False, ("=",)),
    ("credential-assignment",
     r"""(?i)\b(?:api[_-]?key|secret|token|password|passwd|access[_-]?key|client[_-]?secret)\b\s*[=:]\s*[^\s'"]{6,}"""):
        (True, ("key", "secret", "token", "passw")),
}
"""(rule, its exact pattern as compiled: upstream's, `_widen`ed) -> (compare case-folded?, literals one
of which every match contains).

A rule runs only on text holding one of its literals: a regex scan costs
about 25 MB/s per rule, a substring test is far cheaper, and most text holds
none. Keyed by the pattern too, so a changed rule runs unfiltered. For the
case-insensitive rules the literals avoid `i`, the one ASCII letter whose
regex case-match (U+0131, dotless i) `str.casefold` does not map back; the
Kelvin sign (U+212A) and long s (U+017F) casefold to `k` and `s`."""


@cache
def _literals() -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Every rule's literals: (compared as written, compared case-folded), or None when a rule has
    none. Most text holds no literal, and then a few substring tests rule out every rule (a regex
    alternation of the literals costs about 15 us on a 200-byte line; these about 1 us)."""
    exact: list[str] = []
    folded: list[str] = []
    for name, pattern in rules():
        needles = NEEDLES.get((name, pattern.pattern))
        if needles is None:
            return None
        fold, literals = needles
        (folded if fold else exact).extend(literals)
    return tuple(dict.fromkeys(exact)), tuple(dict.fromkeys(folded))


def _any_literal(text: str) -> bool:
    """Could any rule match `text`? False only when no rule's literal is in it."""
    literals = _literals()
    if literals is None:
        return True
    exact, fold = literals
    for literal in exact:
        if literal in text:
            return True
    folded = text.casefold()
    return any(literal in folded for literal in fold)


TEXTS_PER_BLOCK = 1024
"""Texts `may_hold_secrets` tests together before it tests them one by one."""


@cache
def _lowered_literals() -> tuple[str, ...] | None:
    """Every rule's literal lower-cased (None when a rule has none)."""
    literals = _literals()
    return None if literals is None else tuple(dict.fromkeys(x.lower() for x in literals[0] + literals[1]))


@cache
def _lowered_needles() -> tuple[bytes, ...]:
    """`_lowered_literals` as UTF-8, for `any_folded` (only asked when there are literals)."""
    literals = _lowered_literals()
    assert literals is not None
    return tuple(x.encode() for x in literals)


def may_hold_secrets(texts: list[str | None]) -> list[bool]:
    """For each text (None: no text), whether redaction could change it: False only when no
    rule's literal is in it, as `Redactor.redact` decides before it runs any rule.

    Texts are tested in blocks: an ASCII block without any literal, lower-cased
    (a superset of the exact comparisons, as `sweep_needles`), clears all its
    texts at once (`any_folded`: in C when the accelerator is built, one pass
    for all literals); the others are tested one by one.
    """
    literals = _lowered_literals()
    fold = accel.native.any_folded if accel.native else any_folded
    out: list[bool] = []
    for start in range(0, len(texts), TEXTS_PER_BLOCK):
        chunk = [text or "" for text in texts[start:start + TEXTS_PER_BLOCK]]
        block = "\n".join(chunk)
        if literals is not None and block.isascii() and not fold(block.encode(), _lowered_needles()):
            out += [False] * len(chunk)
            continue
        out += map(_any_literal, chunk)
    return out


def _candidates(text: str) -> list[tuple[str, re.Pattern[str]]]:
    """The rules that could match `text` (in table order)."""
    if not _any_literal(text):
        return []
    folded: str | None = None
    out = []
    for name, pattern in rules():
        needles = NEEDLES.get((name, pattern.pattern))
        if needles is not None:
            fold, literals = needles
            if fold and folded is None:
                folded = text.casefold()
            haystack = folded if fold and folded is not None else text
            if not any(literal in haystack for literal in literals):
                continue
        out.append((name, pattern))
    return out


class Redactor:
    """Redacts strings for one run and counts what it replaced, per rule."""

    def __init__(self, key: bytes = PLACEHOLDER_KEY) -> None:
        self._key = key
        self.by_rule: Counter[str] = Counter()
        self.count = 0
        """Spans replaced so far (`total`, kept as it grows: read once per value)."""

    @property
    def total(self) -> int:
        return self.count

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
            self.count += 1
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


FOLDING_TO_ASCII = ("\u212a".encode(), "\u017f".encode())
"""UTF-8 of the only characters a case-insensitive rule matches to an ASCII letter of a literal
(`i` is in none): the Kelvin sign (`k`) and long s (`s`)."""


@cache
def sweep_needles() -> tuple[bytes, ...] | None:
    """What a block of lines must hold, ASCII lower-cased, for a line of it to still match a rule
    (None when a rule has no literal): every rule's literal, the start of a placeholder (blanking
    one out could join text into a match), and the non-ASCII characters that fold to a literal's
    letter. A superset of the exact comparisons, which is all a prefilter needs."""
    literals = _literals()
    if literals is None or not all(lit.isascii() for lit in literals[0] + literals[1]):
        return None
    lowered = (lit.lower().encode() for lit in literals[0] + literals[1])
    return tuple(dict.fromkeys([*lowered, b"<redacted:", *FOLDING_TO_ASCII]))


def any_folded(block: bytes, needles: tuple[bytes, ...]) -> bool:
    """Does `block`, with ASCII A-Z read as a-z, hold one of `needles` (given lower-cased)?

    The C accelerator has the same function, one pass for all needles with
    the GIL released (normalizer/fastscan.c); this is its fallback and reference.
    """
    lowered = block.lower()
    return any(needle in lowered for needle in needles)


def _may_match(data: bytes) -> bool:
    """False only when `data` holds none of `sweep_needles` (then no rule can match any of it)."""
    needles = sweep_needles()
    if needles is None:
        return True
    native = accel.native
    return (native.any_folded if native else any_folded)(data, needles)


def find_unredacted_bytes(data: bytes) -> str | None:
    """`find_unredacted` of `data` as UTF-8 text, cleared at memory speed when it holds no needle."""
    return find_unredacted(data.decode("utf-8", "replace")) if _may_match(data) else None


def unredacted_in_block(block: bytes) -> str | None:
    """`find_unredacted` of each line of `block` (whole UTF-8 lines) in turn: the first line's first
    rule, or None.

    A block holding none of `sweep_needles` cannot hold a match and is cleared
    at memory speed; any other block is swept line by line, so the answer is
    the per-line one whatever the block's size.
    """
    if not _may_match(block):
        return None
    for line in io.BytesIO(block):  # lines as a file gives them
        rule = find_unredacted(line.decode("utf-8", "replace"))
        if rule is not None:
            return rule
    return None
