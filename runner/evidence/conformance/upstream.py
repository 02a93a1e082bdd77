"""Assay's own machine-readable files, vendored verbatim under normalizer/upstream/.

`PINNED` names each file with its upstream path and git blob id at the
pinned commit; `tests/test_conformance.py` recomputes the blob ids so an
edited copy fails. The kernel line schema is applied as published, with
`jsonschema` (draft 2020-12).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
from functools import cache, lru_cache
from typing import Any

import msgspec

from normalizer.artifacts import KernelEvent

_encoder = msgspec.json.Encoder()
UPSTREAM_DIR = importlib.resources.files("normalizer") / "upstream"
"""Package data of `normalizer` (pyproject.toml), which reads the rules table too."""
KERNEL_SCHEMA = "kernel-event-v0.schema.json"
SECRET_RULES = "secret-rules.v1.json"
PINNED = {
    KERNEL_SCHEMA: ("docs/reference/runner/schema/kernel-event-v0.schema.json",
                    "f98d158536b93c2940ae1c72c614067d35169c9b"),
    SECRET_RULES: ("crates/assay-runner-core/tests/fixtures/secret-rules.v1.json",
                   "8695f86ad396bf6251a04c37a860dd9b03e2e010"),
}
"""File here -> (upstream path, git blob id at base.UPSTREAM)."""


def git_blob_id(data: bytes) -> str:
    """What `git hash-object` prints for `data`: sha1 of `blob <len>\\0` + data."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@cache
def _kernel_validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads((UPSTREAM_DIR / KERNEL_SCHEMA).read_bytes())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def warm() -> None:
    """Load the kernel line schema's validator now.

    A process that forks a worker per run (the daemon) calls this once, so
    its workers inherit the validator instead of each importing jsonschema
    and checking the schema again (about 40 ms of every run).
    """
    _kernel_validator()


def _where(path: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@lru_cache(maxsize=4096)
def _kernel_errors(shape: bytes) -> tuple[str, ...]:
    errors = sorted(_kernel_validator().iter_errors(json.loads(shape)), key=lambda e: list(e.absolute_path))
    return tuple(f"{e.message} - at `{_where(e.absolute_path)}` "
                 f"(schema {'/'.join(map(str, e.absolute_schema_path))})" for e in errors)


def kernel_schema_errors(line: KernelEvent) -> tuple[str, ...]:
    """The line schema's errors for one decoded kernel line (empty when it validates).

    Lines differ mostly in `seq`, `pid` and `value`, whose only schema
    constraints are "integer >= 0" and "string or null", which the Struct
    has already enforced. They are replaced by a fixed stand-in before the
    schema runs, so a layer of many lines costs one schema validation per
    distinct shape (the Struct's encoding is canonical: fixed key order).
    """
    shape = msgspec.structs.replace(line, seq=0, pid=0, value="" if isinstance(line.value, str) else None)
    return _kernel_errors(_encoder.encode(shape))
