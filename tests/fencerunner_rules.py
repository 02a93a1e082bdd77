"""fencerunner's own rules for boundary descriptors and records, in Python (no Rust toolchain).

A line-by-line reading of `BoundarySchema::load` and `BoundarySchema::validate`
(src/boundary/mod.rs, src/schema_loader.rs at 9a6e93c): the descriptor's
`schema_version` is `boundary_schema_v1`, its key matches `^[A-Za-z0-9_.-]+$`,
it names a schema (`schema_path`), the schema equals the canonical pattern as
a JSON value, the schema's `schema_version` const is the canonical one and
equals the descriptor's `pattern_version`; a record must carry the
descriptor's key as `schema_key` and validate against the schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from probe_harness import ROOT

CANONICAL = ROOT / "schema" / "boundary_object_schema.json"
"""fencerunner's CANONICAL_BOUNDARY_SCHEMA_PATH; our copy is its bytes (test_probe_contracts)."""
DESCRIPTOR_VERSION = "boundary_schema_v1"


class UpstreamRefusal(ValueError):
    """What fencerunner's loader or validator would say."""


@dataclass(frozen=True)
class UpstreamBoundary:
    key: str
    schema: dict[str, Any]

    def validate(self, record: Any) -> None:
        actual = record.get("schema_key") if isinstance(record, dict) else None
        if actual is None:
            raise UpstreamRefusal(f"boundary object missing schema_key (expected {self.key})")
        if actual != self.key:
            raise UpstreamRefusal(
                f"boundary object schema_key '{actual}' does not match expected '{self.key}'"
            )
        errors = [e.message for e in jsonschema.Draft7Validator(self.schema).iter_errors(record)]
        if errors:
            raise UpstreamRefusal("boundary object failed schema validation:\n" + "\n".join(errors))


def load(descriptor: Path) -> UpstreamBoundary:
    doc = json.loads(descriptor.read_text(encoding="utf-8"))
    if doc.get("schema_version") != DESCRIPTOR_VERSION:
        raise UpstreamRefusal(
            f"boundary descriptor {descriptor} expected schema_version {DESCRIPTOR_VERSION}"
        )
    key = doc.get("key")
    if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", key):
        raise UpstreamRefusal(f"boundary descriptor key must match ^[A-Za-z0-9_.-]+$, got {key}")
    if "schema_path" not in doc:
        raise UpstreamRefusal(f"boundary descriptor {descriptor} missing schema or schema_path field")
    pattern_version = doc.get("pattern_version")
    schema = json.loads((descriptor.parent / doc["schema_path"]).read_text(encoding="utf-8"))
    canonical = json.loads(CANONICAL.read_text(encoding="utf-8"))
    if schema != canonical:
        raise UpstreamRefusal(f"schema {descriptor} does not match canonical schema {CANONICAL}")
    version = schema["properties"]["schema_version"]["const"]
    if version != canonical["properties"]["schema_version"]["const"]:
        raise UpstreamRefusal(f"schema_version '{version}' not in allowed set")
    if pattern_version != version:
        raise UpstreamRefusal(f"boundary descriptor {descriptor} declares pattern_version {pattern_version}")
    return UpstreamBoundary(key, schema)
