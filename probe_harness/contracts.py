"""Load and enforce the probe contracts: boundary descriptor, boundary schema,
capability catalog.

Why here and not in each tool: emit-record, probe-exec, the matrix, the
listener and the gate must agree on what a valid record is, so they all call
`Contracts.problems`. Resolution order for the catalog and the descriptor is
the one the spec gives: command-line flag, environment variable
(`CATALOG_PATH`, `BOUNDARY_PATH`), `catalogs/defaults.json`, built-in default.

The default descriptor is upstream's own `cfbo-v1` (its pattern schema is a
byte-identical copy), so baseline records are the records a fencerunner
user's tools accept. Its `run.mode` admits only `baseline`; when no flag or
variable names a descriptor, the modes it does not admit use the Linux
extension `cfbo-linux-v1` (the canonical pattern plus those modes). A
descriptor named by a flag or variable is used for every mode, and a mode it
does not admit is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import jsonschema

from probe_harness import ROOT

CATALOG_ENV = "CATALOG_PATH"
BOUNDARY_ENV = "BOUNDARY_PATH"
DEFAULTS_FILE = ROOT / "catalogs" / "defaults.json"
BUILTIN = {"catalog": "catalogs/linux_assay_v1.json", "boundary": "catalogs/cfbo-v1.json"}
EXTENSION_DESCRIPTOR = ROOT / "catalogs" / "cfbo-linux-v1.json"
CATALOG_SCHEMA = ROOT / "schema" / "capability_catalog.schema.json"
DESCRIPTOR_SCHEMA = ROOT / "schema" / "boundary_descriptor.schema.json"
PATTERN_VERSION = "boundary_event_v1"


class ContractError(ValueError):
    """A contract file is missing or invalid; the message says which and why."""


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ContractError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ContractError(f"cannot read {what} {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ContractError(f"{what} {path} is not JSON: {exc}") from None


def schema_problems(validator: jsonschema.protocols.Validator, value: Any) -> list[str]:
    """Every schema violation as `path: message`, in a stable order."""
    out = []
    for err in validator.iter_errors(value):
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        out.append(f"{where}: {err.message}")
    return sorted(out)


def _check_against(schema_file: Path, value: Any, path: Path, what: str) -> None:
    schema = _read_json(schema_file, "schema")
    problems = schema_problems(jsonschema.Draft7Validator(schema), value)
    if problems:
        raise ContractError(f"{what} {path} is invalid: {problems[0]}")


def resolve_path(kind: str, flag: str | Path | None, env: Mapping[str, str]) -> Path:
    """The catalog or descriptor to use: flag, then env, then defaults.json, then built-in."""
    if flag:
        return Path(flag).resolve()
    from_env = env.get(CATALOG_ENV if kind == "catalog" else BOUNDARY_ENV)
    if from_env:
        return Path(from_env).resolve()
    if DEFAULTS_FILE.is_file():
        defaults = _read_json(DEFAULTS_FILE, "defaults file")
        if not isinstance(defaults, dict) or not isinstance(defaults.get(kind), str):
            raise ContractError(f"defaults file {DEFAULTS_FILE} has no string '{kind}' entry")
        return (ROOT / defaults[kind]).resolve()
    return (ROOT / BUILTIN[kind]).resolve()


@dataclass(frozen=True)
class Capability:
    """One catalog entry, reduced to what a record snapshots."""

    id: str
    category: str
    layer: str

    def snapshot(self) -> dict[str, str]:
        return {"id": self.id, "category": self.category, "layer": self.layer}


@dataclass(frozen=True)
class Catalog:
    """A loaded capability catalog (`sandbox_catalog_v1`)."""

    key: str
    path: Path
    capabilities: dict[str, Capability]


def load_catalog(path: Path) -> Catalog:
    """Load a catalog; check its schema, unique ids, and that categories and layers exist."""
    doc = _read_json(path, "capability catalog")
    _check_against(CATALOG_SCHEMA, doc, path, "capability catalog")
    categories = set(doc["scope"]["categories"])
    layers = [layer["id"] for layer in doc["scope"]["policy_layers"]]
    if len(set(layers)) != len(layers):
        raise ContractError(f"capability catalog {path}: duplicate policy layer id")
    caps: dict[str, Capability] = {}
    for entry in doc["capabilities"]:
        cid = entry["id"]
        if cid in caps:
            raise ContractError(f"capability catalog {path}: duplicate capability id {cid!r}")
        if entry["category"] not in categories:
            raise ContractError(
                f"capability catalog {path}: {cid} names category {entry['category']!r}, "
                f"not declared in scope.categories ({', '.join(sorted(categories))})"
            )
        if entry["layer"] not in layers:
            raise ContractError(
                f"capability catalog {path}: {cid} names layer {entry['layer']!r}, "
                f"not declared in scope.policy_layers ({', '.join(layers)})"
            )
        caps[cid] = Capability(cid, entry["category"], entry["layer"])
    return Catalog(doc["catalog"]["key"], path, caps)


@dataclass(frozen=True)
class Boundary:
    """A loaded `boundary_schema_v1` descriptor and the schema it points at."""

    key: str
    path: Path
    schema_path: Path
    schema: dict[str, Any]

    @cached_property
    def validator(self) -> jsonschema.Draft7Validator:
        return jsonschema.Draft7Validator(self.schema)

    @property
    def run_modes(self) -> tuple[str, ...]:
        """The run modes this schema key admits (the `run.mode` enum)."""
        return tuple(self.schema["properties"]["run"]["properties"]["mode"]["enum"])


def load_boundary(path: Path) -> Boundary:
    """Load a descriptor and its schema; the schema must be the boundary_event_v1 pattern."""
    doc = _read_json(path, "boundary descriptor")
    _check_against(DESCRIPTOR_SCHEMA, doc, path, "boundary descriptor")
    schema_path = (path.parent / doc["schema_path"]).resolve()
    schema = _read_json(schema_path, "boundary schema")
    try:
        jsonschema.Draft7Validator.check_schema(schema)
        declared = schema["properties"]["schema_version"]["const"]
        schema["properties"]["run"]["properties"]["mode"]["enum"]
    except (jsonschema.SchemaError, KeyError, TypeError) as exc:
        raise ContractError(
            f"boundary schema {schema_path} is not a boundary_event_v1 schema: {exc}"
        ) from None
    if declared != doc["pattern_version"]:
        raise ContractError(
            f"boundary descriptor {path} expects pattern {doc['pattern_version']!r}, "
            f"but {schema_path} declares {declared!r}"
        )
    return Boundary(doc["key"], path, schema_path, schema)


def _claimed_mode(record: Any) -> str:
    """The run mode a record claims ('' when it names none), to pick its descriptor."""
    run = record.get("run") if isinstance(record, dict) else None
    mode = run.get("mode") if isinstance(run, dict) else None
    return mode if isinstance(mode, str) else ""


@dataclass(frozen=True)
class Contracts:
    """The catalog and boundary in effect for one tool invocation.

    `extension` is the Linux-mode descriptor used for the modes `boundary`
    does not admit; None when the descriptor was named explicitly.
    """

    catalog: Catalog
    boundary: Boundary
    extension: Boundary | None = None

    @property
    def run_modes(self) -> tuple[str, ...]:
        """Every run mode some descriptor in effect admits."""
        extra = self.extension.run_modes if self.extension else ()
        return tuple(dict.fromkeys((*self.boundary.run_modes, *extra)))

    def for_mode(self, mode: str) -> Contracts:
        """The contracts a record of `mode` is written and checked under."""
        if mode in self.boundary.run_modes or self.extension is None:
            return self
        if mode in self.extension.run_modes:
            return Contracts(self.catalog, self.extension)
        return self

    def capability(self, cid: str) -> Capability:
        try:
            return self.catalog.capabilities[cid]
        except KeyError:
            raise ContractError(
                f"unknown capability id {cid!r}: not in catalog {self.catalog.key} ({self.catalog.path})"
            ) from None

    def problems(self, record: Any) -> list[str]:
        """Why `record` is not a valid record under these contracts ([] when it is); a record of a
        mode the descriptor does not admit is checked under the extension, when there is one."""
        chosen = self.for_mode(_claimed_mode(record))
        if chosen is not self:
            return chosen.problems(record)
        out = schema_problems(self.boundary.validator, record)
        if out or not isinstance(record, dict):
            return out or ["(root): not a JSON object"]
        if record["schema_key"] != self.boundary.key:
            out.append(f"schema_key: {record['schema_key']!r}, expected {self.boundary.key!r}")
        if record["capabilities_schema_version"] != self.catalog.key:
            out.append(
                f"capabilities_schema_version: {record['capabilities_schema_version']!r}, "
                f"expected {self.catalog.key!r}"
            )
        probe, context = record["probe"], record["capability_context"]
        ids = [probe["primary_capability_id"], *probe["secondary_capability_ids"]]
        snapshots = [context["primary"], *context["secondary"]]
        for cid in ids:
            if cid not in self.catalog.capabilities:
                out.append(f"probe: unknown capability id {cid!r} (catalog {self.catalog.key})")
        expected = [self.catalog.capabilities[c].snapshot() for c in ids if c in self.catalog.capabilities]
        if len(expected) == len(ids) and snapshots != expected:
            out.append("capability_context: does not match the catalog entries of the probe's capability ids")
        return out


def load_contracts(
    catalog: str | Path | None = None,
    boundary: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Contracts:
    """The contracts for these flags and this environment (resolution order above)."""
    env = os.environ if env is None else env
    explicit = bool(boundary or env.get(BOUNDARY_ENV))
    return Contracts(
        load_catalog(resolve_path("catalog", catalog, env)),
        load_boundary(resolve_path("boundary", boundary, env)),
        None if explicit else load_boundary(EXTENSION_DESCRIPTOR),
    )
