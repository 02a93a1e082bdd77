"""Static facts about a probe script, read without running it.

The contract gate and `probe --target --cap` both need a probe's declared
`probe_name` and `primary_capability_id`: the first top-level assignment of
each, with optional quotes, as probes/AGENTS.md asks authors to write them.
"""

from __future__ import annotations

import re
from pathlib import Path

_ASSIGN = re.compile(
    r"""^(?P<var>[a-z_]+)=(?:"(?P<dq>[^"$`\\]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s"'$`;#]+))\s*(?:#.*)?$"""
)


def declared(text: str, var: str) -> str | None:
    """The value of the first top-level `var=...` literal assignment, or None."""
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if m and m["var"] == var:
            return next(v for v in (m["dq"], m["sq"], m["bare"]) if v is not None)
    return None


def primary_capability(path: Path) -> str | None:
    """The probe's declared primary capability id, or None when it declares none."""
    return declared(path.read_text(encoding="utf-8", errors="replace"), "primary_capability_id")
