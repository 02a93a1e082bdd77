"""Generate the JSON Schemas in `schema/` from the msgspec Structs.

`normalizer/artifacts.py` is the one definition of every archive member; the
schemas are derived from it so that consumers without msgspec (jsonschema,
other languages) check exactly what `assay-runner validate` decodes. Nobody
edits `schema/*.json` by hand: change the Struct, rerun this script, commit
both. `--check` (run by the tests) fails when the committed files drift.

Only shape lives in the schemas (fields, types, enums, patterns). Rules that
span fields, lines or members (seq order, kind/event_type pairs, coverage
versus kernel lines...) are enforced by `runner/evidence/validate.py` and documented
in `docs/artifacts.md`.

Usage: gen_schemas.py [--check] [--out DIR]
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from normalizer import artifacts as a

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
ID_PREFIX = "urn:assay-runner:schema:"


@dataclass(frozen=True)
class SchemaSpec:
    """One generated schema file: which Struct, and how it is titled."""

    filename: str
    struct: type[msgspec.Struct]
    title: str


# Policy and SDK line Structs do not exist yet; when they land in
# normalizer/artifacts.py, add `policy-event-v0.schema.json` and
# `sdk-event-v0.schema.json` here (and in runner/evidence/lines.py LINE_TYPES).
SCHEMAS: tuple[SchemaSpec, ...] = (
    SchemaSpec(
        "archive-manifest-v0.schema.json",
        a.Manifest,
        f"Archive manifest ({a.MANIFEST_SCHEMA})",
    ),
    SchemaSpec(
        "capability-surface-v0.schema.json",
        a.CapabilitySurface,
        f"Capability surface ({a.SURFACE_SCHEMA})",
    ),
    SchemaSpec(
        "correlation-report-v0.schema.json",
        a.CorrelationReport,
        f"Correlation report ({a.CORRELATION_SCHEMA})",
    ),
    SchemaSpec(
        "kernel-event-v0.schema.json",
        a.KernelEvent,
        f"Kernel event line ({a.KERNEL_EVENT_SCHEMA})",
    ),
    SchemaSpec(
        "observation-health-v0.schema.json",
        a.ObservationHealth,
        f"Observation health ({a.HEALTH_SCHEMA})",
    ),
    SchemaSpec(
        "policy-event-v0.schema.json",
        a.PolicyEvent,
        f"Policy layer line ({a.POLICY_EVENT_SCHEMA})",
    ),
    SchemaSpec(
        "run-event-v0.schema.json",
        a.RunEvent,
        f"Runner phase marker line ({a.RUN_EVENT_SCHEMA})",
    ),
    SchemaSpec(
        "sdk-event-v0.schema.json",
        a.SdkEvent,
        f"SDK layer line ({a.SDK_EVENT_SCHEMA})",
    ),
)


def build_schema(spec: SchemaSpec) -> dict[str, Any]:
    """The JSON Schema document for `spec`, with the root Struct inlined.

    msgspec puts every Struct under `$defs` and points the root at one of
    them; lifting the root out makes `title`/`description` describe the
    document itself while nested Structs stay referenced from `$defs`.
    """
    generated = msgspec.json.schema(spec.struct)
    defs: dict[str, Any] = generated["$defs"]
    for definition in defs.values():
        if "description" in definition:  # msgspec keeps the docstring's indentation
            definition["description"] = inspect.cleandoc(definition["description"])
    root_name = generated["$ref"].rsplit("/", 1)[-1]
    root = defs.pop(root_name)
    document: dict[str, Any] = {
        **root,
        "$schema": DRAFT,
        "$id": ID_PREFIX + spec.filename.removesuffix(".schema.json"),
        "title": spec.title,
    }
    if defs:
        document["$defs"] = defs
    return document


def render(spec: SchemaSpec) -> str:
    """Deterministic text of one schema file: sorted keys, 2-space indent."""
    return json.dumps(build_schema(spec), indent=2, sort_keys=True) + "\n"


def rendered() -> dict[str, str]:
    """Every schema file this script owns, by file name."""
    return {spec.filename: render(spec) for spec in SCHEMAS}


def stale_files(out: Path) -> list[str]:
    """Names of files under `out` that are missing or differ from `rendered()`."""
    stale = []
    for name, text in rendered().items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def write(out: Path) -> list[str]:
    """Write changed schema files to `out`; return the names written."""
    out.mkdir(parents=True, exist_ok=True)
    changed = stale_files(out)
    texts = rendered()
    for name in changed:
        (out / name).write_text(texts[name], encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    """Write the schemas, or with --check report drift and exit 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the files differ from what would be written"
    )
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR, help="schema directory")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.out)
        for name in stale:
            print(f"{args.out / name}: out of date; run scripts/gen_schemas.py", file=sys.stderr)
        return 1 if stale else 0
    for name in write(args.out):
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
