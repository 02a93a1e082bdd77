"""Referenced artifacts on disk match their hashes (rule family `integrity`, `--verify-artifacts`).

The contract makes every artifact carry a hash; a reader who has the run
directory can hold the files to it. An artifact whose `content_ref` names a
file relative to the events file must exist there, stay inside the run
directory, and hash to its `sha256:`. Directory references (`workspace/`)
and artifacts without a content_ref are not files and are skipped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from blackbox.check.base import Line, Violation, get

RULE = "integrity"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _problems(line: Line, base: Path) -> Iterator[str]:
    for n, art in enumerate(get(line.event, "agent_action", "artifacts") or []):
        ref, want = get(art, "content_ref"), get(art, "hash")
        if not isinstance(ref, str) or not ref or ref.endswith("/") or not isinstance(want, str):
            continue
        where = f"agent_action.artifacts[{n}] ({ref})"
        path = (base / ref).resolve()
        if not path.is_relative_to(base.resolve()):
            yield f"{where} points outside the run directory"
        elif not path.is_file():
            yield f"{where} is missing beside the events file"
        elif want.startswith("sha256:") and _sha256(path) != want:
            yield f"{where} does not match its hash: the file changed after the event was written"


def check(lines: list[Line], base: Path) -> list[Violation]:
    """Integrity violations of the artifacts the lines reference, relative to `base`."""
    return [Violation(line.number, RULE, msg) for line in lines if line.event is not None
            for msg in _problems(line, base)]
