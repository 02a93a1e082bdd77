"""The JSON Schemas are generated, current, and agree with the goldens.

Goldens are checked twice, independently: against `schema/` with the
`jsonschema` package (what a consumer without msgspec would do) and with
`runner.evidence.validate` (msgspec Structs plus the contract's rules). The golden
index is the list of what to check, so a golden that is not indexed fails.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import msgspec
import pytest

from runner.evidence.archive import load_members
from runner.evidence.validate import (
    DOCUMENT_TYPES,
    LINE_TYPES,
    validate_member,
    validate_members,
)

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "golden"
SCHEMA_DIR = ROOT / "schema"
GEN = ROOT / "scripts" / "gen_schemas.py"
NO_SCHEMA = "none"


def _load_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_schemas", GEN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gen = _load_gen()
STRUCT_BY_SCHEMA = {f"schema/{s.filename}": s.struct for s in gen.SCHEMAS}
MEMBER_BY_STRUCT = {t: name for name, t in {**DOCUMENT_TYPES, **LINE_TYPES}.items()}


def golden_index() -> dict[str, str]:
    """golden file (relative to golden/) -> schema column, from index.md's tables."""
    rows = {}
    for line in (GOLDEN / "index.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        name = cells[0].strip("`")
        schema = cells[2].strip("`")
        rows[name] = NO_SCHEMA if schema.startswith(NO_SCHEMA) else schema
    return rows


INDEX = golden_index()


def run_gen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GEN), *args], capture_output=True, text=True, check=False
    )


def test_committed_schemas_are_current() -> None:
    result = run_gen("--check")
    assert result.returncode == 0, result.stderr


def test_check_reports_drift_and_write_fixes_it(tmp_path: Path) -> None:
    out = tmp_path / "schema"
    shutil.copytree(SCHEMA_DIR, out)
    (out / "kernel-event-v0.schema.json").write_text("{}\n", encoding="utf-8")
    (out / "run-event-v0.schema.json").unlink()

    result = run_gen("--check", "--out", str(out))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{out}/kernel-event-v0.schema.json: out of date; run scripts/gen_schemas.py",
        f"{out}/run-event-v0.schema.json: out of date; run scripts/gen_schemas.py",
    ]
    assert run_gen("--out", str(out)).returncode == 0
    assert run_gen("--check", "--out", str(out)).returncode == 0


def test_output_is_deterministic() -> None:
    assert gen.rendered() == gen.rendered()
    for text in gen.rendered().values():
        assert text.endswith("}\n")
        assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize("spec", gen.SCHEMAS, ids=lambda s: s.filename)
def test_schema_is_valid_draft_2020_12_with_metadata(spec: Any) -> None:
    schema = json.loads((SCHEMA_DIR / spec.filename).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == "urn:assay-runner:schema:" + spec.filename.removesuffix(".schema.json")
    assert schema["title"]
    assert schema["description"] == inspect.cleandoc(spec.struct.__doc__)
    assert schema["additionalProperties"] is False


def test_kernel_schema_is_the_one_the_contract_names() -> None:
    assert (SCHEMA_DIR / "kernel-event-v0.schema.json").is_file()


def test_index_lists_every_golden_file_and_only_existing_ones() -> None:
    on_disk = {
        p.relative_to(GOLDEN).as_posix()
        for p in GOLDEN.rglob("*")
        if p.is_file() and p.name != "index.md"
    }
    assert set(INDEX) == on_disk
    for schema in INDEX.values():
        assert schema == NO_SCHEMA or schema in STRUCT_BY_SCHEMA, schema


def test_every_v0_member_has_a_golden() -> None:
    archive = {name.removeprefix("archive-minimal/") for name in INDEX}
    assert set(DOCUMENT_TYPES) | set(LINE_TYPES) <= archive


def _documents(path: Path) -> list[bytes]:
    """The JSON documents of a golden file: the file, or each NDJSON line."""
    data = path.read_bytes()
    if path.suffix == ".ndjson":
        return [line + b"\n" for line in data.splitlines()]
    return [data]


@pytest.mark.parametrize("name", sorted(INDEX))
def test_golden_matches_its_json_schema(name: str) -> None:
    path = GOLDEN / name
    if INDEX[name] == NO_SCHEMA:
        assert path.read_bytes() == b"", "only the empty policy/sdk layers lack a schema"
        return
    schema = json.loads((ROOT / INDEX[name]).read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    documents = _documents(path)
    assert documents
    for document in documents:
        errors = [e.message for e in validator.iter_errors(json.loads(document))]
        assert errors == []


@pytest.mark.parametrize("name", sorted(n for n in INDEX if INDEX[n] != NO_SCHEMA))
def test_golden_is_in_canonical_serialization(name: str) -> None:
    """Key order, compactness and trailing newline are those the runner writes."""
    struct = STRUCT_BY_SCHEMA[INDEX[name]]
    encoder = msgspec.json.Encoder()
    for document in _documents(GOLDEN / name):
        assert encoder.encode(msgspec.json.decode(document, type=struct)) + b"\n" == document


@pytest.mark.parametrize("name", sorted(n for n in INDEX if "/" not in n))
def test_standalone_golden_passes_validate_member(name: str) -> None:
    member = MEMBER_BY_STRUCT[STRUCT_BY_SCHEMA[INDEX[name]]]
    assert validate_member(member, (GOLDEN / name).read_bytes()) == []


@pytest.mark.parametrize("archive", ["archive-minimal", "archive-sdk-policy"])
def test_golden_archive_passes_validate_members(archive: str) -> None:
    members = load_members(GOLDEN / archive)
    assert sorted(members) == sorted({**DOCUMENT_TYPES, **LINE_TYPES})
    assert validate_members(members) == []


def test_schema_rejects_what_the_contract_forbids() -> None:
    """The schemas are strict on their own, not only through msgspec."""
    schema = json.loads((SCHEMA_DIR / "kernel-event-v0.schema.json").read_text(encoding="utf-8"))
    line = json.loads((GOLDEN / "kernel-layer-contract.ndjson").read_text().splitlines()[0])
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(line)
    assert not validator.is_valid({**line, "unknown": 1})
    assert not validator.is_valid({**line, "access_mode": "append"})
    assert not validator.is_valid({**line, "kind": "sendto"})
    assert not validator.is_valid({**line, "run_id": ""})
    assert not validator.is_valid({k: v for k, v in line.items() if k != "value"})
