"""A golden archive's members, and edits that break them in one way each (the manifest rebuilt
unless it is what an edit breaks): the validator's tests and the installed wheel's use them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from runner.evidence.archive import MANIFEST, build_manifest, load_members
from tests.support import ROOT

GOLDEN = ROOT / "golden" / "archive-minimal"
RUN_ID = "run_minimal"
KERNEL = "layers/kernel.ndjson"

Members = dict[str, bytes]
Obj = dict[str, Any]


def golden() -> Members:
    return load_members(GOLDEN)


def dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def remanifest(m: Members) -> Members:
    """Rebuild the manifest so that only the intended break remains."""
    run_id = json.loads(m[MANIFEST])["run_id"] if MANIFEST in m else RUN_ID
    m[MANIFEST] = build_manifest(run_id, {k: v for k, v in m.items() if k != MANIFEST})
    return m


def lines(name: str, change: Callable[[list[Any]], object]) -> Callable[[Members], Members]:
    """Mutation: change the list of NDJSON values of `name` (objects, until a change puts
    another value in), then remanifest."""

    def mutate(m: Members) -> Members:
        items = [json.loads(x) for x in m[name].splitlines()]
        change(items)
        m[name] = b"".join(dump(x) for x in items)
        return remanifest(m)

    return mutate


def set_line(name: str, index: int, **fields: Any) -> Callable[[Members], Members]:
    return lines(name, lambda xs: xs[index].update(fields))
