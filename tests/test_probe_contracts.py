"""The probe contracts as files, and emit-record / probe --listen enforcing them.

No root needed: these build records with the real emit-record and check that
every bad input is refused with one line and nothing on stdout.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from probe_harness import ROOT, contracts
from probe_harness.contracts import (
    ContractError,
    Contracts,
    load_boundary,
    load_catalog,
    load_contracts,
    resolve_path,
)
from probe_harness.emit import SNIPPET_MAX, EmitError, emit
from probe_harness.op import status_for_errno

BIN = ROOT / ".venv" / "bin"
PATTERN = ROOT / "schema" / "boundary_object_schema.json"
LINUX_SCHEMA = ROOT / "schema" / "boundary_object_schema.cfbo-linux-v1.json"
CATALOG = ROOT / "catalogs" / "linux_assay_v1.json"
CFBO_V1 = ROOT / "catalogs" / "cfbo-v1.json"

BASE_FLAGS = [
    "--run-mode", "baseline", "--probe-name", "fs_demo", "--probe-version", "1",
    "--primary-capability-id", "cap_fs_write_workspace_tree", "--command", "printf x > f",
    "--category", "fs", "--verb", "write", "--target", "/ws/f", "--status", "denied",
    "--errno", "EACCES", "--message", "Permission denied", "--raw-exit-code", "1",
]  # fmt: skip
ENV = {"FENCE_WORKSPACE_ROOT": "/ws", "FENCE_RUN_MODE": "baseline", "FENCE_SANDBOX_MODE": ""}


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _objects(node: Any, where: str = "$") -> list[tuple[str, dict]]:
    """Every sub-schema that describes an object."""
    out = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            out.append((where, node))
        for key, value in node.items():
            out.extend(_objects(value, f"{where}/{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_objects(value, f"{where}/{i}"))
    return out


UPSTREAM_BLOBS = {
    "schema/boundary_object_schema.json": "bed6ddfbf2b4128372e56011d1a8dbb46e1dc1c6",
    "catalogs/cfbo-v1.json": "72ccbd0178e96a707454933f12ef12d4707c9c71",
}
"""Git blob ids of fencerunner's canonical files at 9a6e93c (the spec's upstream/fencerunner/README.md)."""


@pytest.mark.parametrize(
    "path",
    [ROOT / "schema" / "boundary_descriptor.schema.json", ROOT / "schema" / "capability_catalog.schema.json"],
    ids=lambda p: p.name,
)
def test_our_own_contract_schemas_are_valid_and_every_object_is_closed(path: Path) -> None:
    schema = _load(path)
    jsonschema.Draft7Validator.check_schema(schema)
    objects = _objects(schema)
    assert objects and _objects({"properties": {"a": {"type": "object"}}})[1][1] == {"type": "object"}
    for where, obj in objects:
        extra = obj.get("additionalProperties")
        # closed: no extra keys at all, or extra keys only of a declared type (the typed maps)
        assert extra is False or (isinstance(extra, dict) and extra), f"{path.name} {where} is open"


def test_the_pattern_and_cfbo_v1_are_upstreams_bytes() -> None:
    """fencerunner's loader compares the pattern with its canonical copy: ours must be that copy."""
    for rel, blob in UPSTREAM_BLOBS.items():
        data = (ROOT / rel).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, rel


def test_linux_key_differs_from_the_pattern_only_in_its_run_modes() -> None:
    pattern, linux = _load(PATTERN), _load(LINUX_SCHEMA)
    jsonschema.Draft7Validator.check_schema(linux)
    assert pattern["properties"]["run"]["properties"]["mode"]["enum"] == ["baseline"]
    modes = linux["properties"]["run"]["properties"]["mode"]["enum"]
    assert modes == ["baseline", "read-only", "workspace-write", "danger-full-access", "external"]
    a, b = copy.deepcopy(pattern), copy.deepcopy(linux)
    for doc in (a, b):
        doc["properties"]["run"]["properties"]["mode"].pop("enum")
    assert a == b
    assert load_boundary(ROOT / "catalogs" / "cfbo-linux-v1.json").run_modes == tuple(modes)
    assert load_boundary(CFBO_V1).run_modes == ("baseline",)


def test_catalog_loads_with_unique_ids_and_declared_categories_and_layers() -> None:
    catalog = load_catalog(CATALOG)
    assert catalog.key == "linux_assay_v1"
    doc = _load(CATALOG)
    assert len(catalog.capabilities) == len(doc["capabilities"])
    assert {c.category for c in catalog.capabilities.values()} == set(doc["scope"]["categories"])
    assert {c.layer for c in catalog.capabilities.values()} == {
        x["id"] for x in doc["scope"]["policy_layers"]
    }


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["capabilities"].append(copy.deepcopy(d["capabilities"][0])), "duplicate capability id"),
    (lambda d: d["capabilities"][0].update(category="kernel_magic"), "category 'kernel_magic'"),
    (lambda d: d["capabilities"][0].update(layer="hypervisor"), "layer 'hypervisor'"),
    (lambda d: d["capabilities"][0].update(colour="red"), "Additional properties"),
    (lambda d: d["scope"].pop("policy_layers"), "'policy_layers' is a required property"),
])  # fmt: skip
def test_bad_catalogs_are_refused(tmp_path: Path, change: Any, message: str) -> None:
    doc = _load(CATALOG)
    change(doc)
    bad = tmp_path / "cat.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ContractError, match=message):
        load_catalog(bad)


def test_resolution_order_flag_env_defaults_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag, env = tmp_path / "flag.json", tmp_path / "env.json"
    assert resolve_path("catalog", flag, {"CATALOG_PATH": str(env)}) == flag
    assert resolve_path("catalog", None, {"CATALOG_PATH": str(env)}) == env
    assert resolve_path("boundary", None, {"BOUNDARY_PATH": str(env)}) == env
    defaults = tmp_path / "defaults.json"
    defaults.write_text(json.dumps({"catalog": "catalogs/other.json", "boundary": "catalogs/cfbo-v1.json"}))
    monkeypatch.setattr(contracts, "DEFAULTS_FILE", defaults)
    assert resolve_path("catalog", None, {}) == ROOT / "catalogs" / "other.json"
    monkeypatch.setattr(contracts, "DEFAULTS_FILE", tmp_path / "missing.json")
    assert resolve_path("catalog", None, {}) == ROOT / "catalogs" / "linux_assay_v1.json"
    assert resolve_path("boundary", None, {}) == ROOT / "catalogs" / "cfbo-v1.json"


def test_emit_builds_a_valid_record_with_snapshots_and_stack() -> None:
    extra = [
        "--secondary-capability-id",
        "cap_fs_read_workspace_tree",
        "--operation-arg",
        "write_mode",
        "create",
        "--operation-arg-json",
        "bytes",
        "12",
        "--payload-raw-list",
        "tries",
        "a",
        "--payload-raw-list",
        "tries",
        "b",
        "--payload-raw-null",
        "note",
    ]
    record = emit(BASE_FLAGS + extra, {**ENV, "FENCE_SANDBOX_MODE": "workspace-write"})
    assert load_contracts().problems(record) == []
    assert record["schema_key"] == "cfbo-v1"  # a baseline record: upstream's own key
    assert record["capabilities_schema_version"] == "linux_assay_v1"
    assert record["stack"]["sandbox_mode"] == "workspace-write"
    assert record["stack"]["os"] == " ".join(os.uname()[i] for i in (0, 2, 4))
    assert record["run"] == {"mode": "baseline", "workspace_root": "/ws", "command": "printf x > f"}
    assert record["operation"]["args"] == {"write_mode": "create", "bytes": 12}
    assert record["payload"]["raw"] == {"tries": ["a", "b"], "note": None}
    assert record["result"] == {
        "observed_result": "denied",
        "raw_exit_code": 1,
        "errno": "EACCES",
        "message": "Permission denied",
        "error_detail": None,
    }
    assert record["capability_context"] == {
        "primary": {
            "id": "cap_fs_write_workspace_tree",
            "category": "filesystem",
            "layer": "fs_access_control",
        },
        "secondary": [
            {"id": "cap_fs_read_workspace_tree", "category": "filesystem", "layer": "fs_access_control"}
        ],
    }


def test_a_linux_mode_record_takes_the_extension_key_unless_a_descriptor_is_named() -> None:
    flags = ["--run-mode", "read-only", *BASE_FLAGS[2:]]
    env = {**ENV, "FENCE_RUN_MODE": "read-only", "FENCE_SANDBOX_MODE": "read-only"}
    record = emit(flags, env)
    assert record["schema_key"] == "cfbo-linux-v1"
    both = load_contracts()
    assert both.problems(record) == [] and both.for_mode("read-only").boundary.key == "cfbo-linux-v1"
    assert Contracts(both.catalog, both.boundary).problems(record)  # upstream's key alone refuses the mode
    with pytest.raises(EmitError, match="'read-only' is not one of"):
        emit(flags, {**env, "BOUNDARY_PATH": str(CFBO_V1)})


def test_emit_truncates_snippets() -> None:
    record = emit([*BASE_FLAGS, "--payload-stderr", "x" * 1000, "--payload-stdout", "ok"], ENV)
    assert len(record["payload"]["stderr_snippet"]) == SNIPPET_MAX
    assert record["payload"]["stderr_snippet"].endswith("...")
    assert record["payload"]["stdout_snippet"] == "ok"


@pytest.mark.parametrize(("flags", "env", "message"), [
    (["--primary-capability-id", "cap_nope"], ENV, "unknown capability id 'cap_nope'"),
    (["--secondary-capability-id", "cap_nope"], ENV, "unknown capability id 'cap_nope'"),
    (["--status", "maybe"], ENV, "invalid choice: 'maybe'"),
    (["--run-mode", "read-only"], ENV, "differs from FENCE_RUN_MODE"),
    (["--run-mode", "read-only", "--boundary", str(CFBO_V1)], {}, "'read-only' is not one of"),
    (["--run-mode", "sideways"], {}, "'sideways' is not one of"),
    (["--raw-exit-code", "one"], ENV, "must be an integer"),
    (["--operation-args", "[1]"], ENV, "must be a JSON object"),
    (["--payload-raw-field", "big", "x" * 5000], ENV, "over the 4096-byte limit"),
])  # fmt: skip
def test_emit_refuses_bad_flags(flags: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises((EmitError, ContractError), match=message):
        emit(BASE_FLAGS + flags, {"FENCE_WORKSPACE_ROOT": "/ws", **env})


def test_emit_record_cli_prints_one_object_or_one_error_line(tmp_path: Path) -> None:
    env = {**os.environ, **ENV}
    ok = subprocess.run(
        [BIN / "emit-record", *BASE_FLAGS], env=env, capture_output=True, text=True, check=False
    )
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.splitlines()) == 1 and json.loads(ok.stdout)["probe"]["id"] == "fs_demo"
    bad = subprocess.run(
        [BIN / "emit-record", *BASE_FLAGS, "--primary-capability-id", "cap_nope"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (bad.returncode, bad.stdout) == (1, "")
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("emit-record: error: unknown capability id")


def test_listen_validates_a_stream_and_names_bad_lines() -> None:
    good = json.dumps(emit(BASE_FLAGS, ENV))
    broken = json.loads(good)
    broken["result"]["observed_result"] = "maybe"
    stream = "\n".join([good, json.dumps(broken), "not json", good]) + "\n"
    done = subprocess.run(
        [BIN / "probe", "--listen"], input=stream, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith("line 2: result/observed_result: 'maybe' is not one of")
    assert lines[1].startswith("line 3: not JSON")
    assert "baseline\tdenied\t2" in lines
    assert lines[-1].startswith("4 records: 2 valid, 2 invalid")
    clean = subprocess.run(
        [BIN / "probe", "--listen"], input=good + "\n", capture_output=True, text=True, check=False
    )
    assert clean.returncode == 0 and clean.stdout.splitlines()[-1].startswith("1 records: 1 valid, 0 invalid")


def test_errno_normalization_table() -> None:
    import errno

    assert status_for_errno(None) == "success"
    for code in (errno.EACCES, errno.EPERM, errno.EROFS):
        assert status_for_errno(code) == "denied"
    for code in (errno.ENOENT, errno.ECONNREFUSED, errno.ENETUNREACH, errno.ETIMEDOUT):
        assert status_for_errno(code) == "error"


def test_emit_payload_and_args_from_files(tmp_path: Path) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"stdout_snippet": "out", "stderr_snippet": None, "raw": {"a": 1}}))
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"mode": "append"}))
    stderr = tmp_path / "stderr.txt"
    stderr.write_bytes(b"bash: f: Permission denied\n\xff")
    flags = ["--payload-file", str(payload), "--payload-stderr-file", str(stderr),
             "--payload-raw-field", "b", "two", "--operation-args-file", str(args)]  # fmt: skip
    record = emit([*BASE_FLAGS, *flags], ENV)
    denied = "bash: f: Permission denied\n\ufffd"
    expected = {"stdout_snippet": "out", "stderr_snippet": denied, "raw": {"a": 1, "b": "two"}}
    assert record["payload"] == expected
    assert record["operation"]["args"] == {"mode": "append"}
    payload.write_text(json.dumps({"stdout": "x"}))
    with pytest.raises(EmitError, match="--payload-file has unknown keys: stdout"):
        emit([*BASE_FLAGS, "--payload-file", str(payload)], ENV)
    with pytest.raises(EmitError, match="cannot read --payload-file"):
        emit([*BASE_FLAGS, "--payload-file", str(tmp_path / "missing.json")], ENV)


def test_detect_stack_cli() -> None:
    env = {**os.environ, "FENCE_SANDBOX_MODE": "read-only"}
    done = subprocess.run([BIN / "detect-stack"], env=env, capture_output=True, text=True, check=False)
    uname = os.uname()
    assert json.loads(done.stdout) == {"sandbox_mode": "read-only", "os": f"{uname[0]} {uname[2]} {uname[4]}"}
    env["FENCE_SANDBOX_MODE"] = "yolo"
    bad = subprocess.run([BIN / "detect-stack"], env=env, capture_output=True, text=True, check=False)
    assert (bad.returncode, bad.stdout) == (1, "")
    assert "FENCE_SANDBOX_MODE='yolo' is not a sandbox mode" in bad.stderr
