"""`emit-record`: build one boundary_event_v1 record from flags and print it.

Probes call this exactly once. It validates the capability ids against the
catalog, snapshots them into `capability_context`, fills `stack`
(detect-stack) and `run.workspace_root`, truncates the output snippets, and
validates the whole record against the boundary schema before printing
exactly one JSON object. Anything wrong is a one-line error on stderr and
nothing on stdout, so a broken probe can never produce half a record.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from probe_harness.contracts import PATTERN_VERSION, ContractError, Contracts, load_contracts
from probe_harness.stack import StackError, detect_stack

SNIPPET_MAX = 400
PAYLOAD_MAX_BYTES = 4096
STATUSES = ("success", "denied", "partial", "error")
RUN_MODE_ENV = "FENCE_RUN_MODE"
WORKSPACE_ENV = "FENCE_WORKSPACE_ROOT"
# Per-key flags of payload.raw and operation.args: string value, JSON value, null, list append.
KEY_FLAGS = {
    "raw": ("--payload-raw-field", "--payload-raw-field-json", "--payload-raw-null", "--payload-raw-list"),
    "args": ("--operation-arg", "--operation-arg-json", "--operation-arg-null", "--operation-arg-list"),
}


class EmitError(ValueError):
    """The flags do not describe a valid record; the message says which and why."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise EmitError(message)


def build_parser() -> argparse.ArgumentParser:
    """The flags the spec names (probe-authoring.md), with upstream's spellings."""
    p = _Parser(
        prog="emit-record", allow_abbrev=False, description="Print one validated boundary_event_v1 record."
    )
    p.add_argument("--catalog", help="capability catalog (else CATALOG_PATH, catalogs/defaults.json)")
    p.add_argument("--boundary", help="boundary descriptor (else BOUNDARY_PATH, catalogs/defaults.json)")
    req = p.add_argument_group("required")
    req.add_argument("--run-mode", required=True)
    req.add_argument("--probe-name", "--probe-id", dest="probe_name", required=True)
    req.add_argument("--probe-version", required=True)
    req.add_argument("--primary-capability-id", required=True)
    req.add_argument("--command", required=True)
    req.add_argument("--category", required=True)
    req.add_argument("--verb", required=True)
    req.add_argument("--target", required=True)
    req.add_argument("--status", required=True, choices=STATUSES)
    p.add_argument("--secondary-capability-id", action="append", default=[])
    p.add_argument("--errno", default="", help="errno mnemonic (EACCES ...); empty for null")
    p.add_argument("--message", default="")
    p.add_argument("--raw-exit-code", default="")
    p.add_argument("--error-detail", default="")
    pay = p.add_argument_group("payload")
    pay.add_argument(
        "--payload-file", type=Path, help="JSON object with stdout_snippet, stderr_snippet and/or raw"
    )
    pay.add_argument("--payload-stdout")
    pay.add_argument("--payload-stdout-file", type=Path)
    pay.add_argument("--payload-stderr")
    pay.add_argument("--payload-stderr-file", type=Path)
    pay.add_argument("--payload-raw", help="JSON object merged into payload.raw")
    pay.add_argument("--payload-raw-file", type=Path)
    ops = p.add_argument_group("operation args")
    ops.add_argument("--operation-args", help="JSON object merged into operation.args")
    ops.add_argument("--operation-args-file", type=Path)
    for dest, flags in KEY_FLAGS.items():
        string, as_json, null, as_list = flags
        p.add_argument(
            string, dest=f"{dest}_str", nargs=2, action="append", default=[], metavar=("KEY", "VALUE")
        )
        p.add_argument(
            as_json, dest=f"{dest}_json", nargs=2, action="append", default=[], metavar=("KEY", "JSON")
        )
        p.add_argument(null, dest=f"{dest}_null", action="append", default=[], metavar="KEY")
        p.add_argument(
            as_list,
            dest=f"{dest}_list",
            nargs=2,
            action="append",
            default=[],
            metavar=("KEY", "VALUE"),
            help="append VALUE to the list KEY",
        )
    return p


def _json_value(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EmitError(f"{what} is not JSON: {exc}") from None


def _json_object(text: str, what: str) -> dict[str, Any]:
    value = _json_value(text, what)
    if not isinstance(value, dict):
        raise EmitError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _read(path: Path, what: str) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise EmitError(f"cannot read {what} {path}: {exc.strerror}") from None


def _build_map(base: list[dict[str, Any]], args: argparse.Namespace, dest: str) -> dict[str, Any]:
    """Merge object flags, then key flags in order: later flags win, lists accumulate."""
    out: dict[str, Any] = {}
    for obj in base:
        out.update(obj)
    for key, value in getattr(args, f"{dest}_str"):
        out[key] = value
    for key, value in getattr(args, f"{dest}_json"):
        out[key] = _json_value(value, f"value of {key!r}")
    for key in getattr(args, f"{dest}_null"):
        out[key] = None
    for key, value in getattr(args, f"{dest}_list"):
        current = out.setdefault(key, [])
        if not isinstance(current, list):
            raise EmitError(f"{key!r} is already set to a non-list value; cannot append {value!r}")
        current.append(value)
    return out


def snippet(text: str | None) -> str | None:
    """At most SNIPPET_MAX characters, NULs removed, an ellipsis marking a cut."""
    if text is None:
        return None
    text = text.replace("\0", "")
    return text if len(text) <= SNIPPET_MAX else text[: SNIPPET_MAX - 3] + "..."


def _payload(args: argparse.Namespace) -> dict[str, Any]:
    base: dict[str, Any] = {}
    if args.payload_file:
        base = _json_object(_read(args.payload_file, "--payload-file"), "--payload-file")
        unknown = sorted(set(base) - {"stdout_snippet", "stderr_snippet", "raw"})
        if unknown:
            raise EmitError(f"--payload-file has unknown keys: {', '.join(unknown)}")
    stdout = base.get("stdout_snippet")
    stderr = base.get("stderr_snippet")
    if args.payload_stdout is not None:
        stdout = args.payload_stdout
    if args.payload_stdout_file:
        stdout = _read(args.payload_stdout_file, "--payload-stdout-file")
    if args.payload_stderr is not None:
        stderr = args.payload_stderr
    if args.payload_stderr_file:
        stderr = _read(args.payload_stderr_file, "--payload-stderr-file")
    raws = [base.get("raw") or {}]
    if args.payload_raw:
        raws.append(_json_object(args.payload_raw, "--payload-raw"))
    if args.payload_raw_file:
        raws.append(_json_object(_read(args.payload_raw_file, "--payload-raw-file"), "--payload-raw-file"))
    payload = {
        "stdout_snippet": snippet(stdout),
        "stderr_snippet": snippet(stderr),
        "raw": _build_map(raws, args, "raw"),
    }
    size = len(json.dumps(payload).encode())
    if size > PAYLOAD_MAX_BYTES:
        raise EmitError(
            f"payload is {size} bytes, over the {PAYLOAD_MAX_BYTES}-byte limit: keep payload.raw small"
        )
    return payload


def _nullable(text: str) -> str | None:
    return text or None


def _exit_code(text: str) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise EmitError(f"--raw-exit-code must be an integer, got {text!r}") from None


def workspace_root(env: Mapping[str, str]) -> str | None:
    """FENCE_WORKSPACE_ROOT, else the git top level, else the working directory."""
    if env.get(WORKSPACE_ENV):
        return env[WORKSPACE_ENV]
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=5, check=False
        )
        if top.returncode == 0 and top.stdout.strip():
            return top.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return env.get("PWD") or os.getcwd()


def build_record(args: argparse.Namespace, contracts: Contracts, env: Mapping[str, str]) -> dict[str, Any]:
    """The record the flags describe; raises EmitError/ContractError when it cannot be valid."""
    expected_mode = env.get(RUN_MODE_ENV)
    if expected_mode and args.run_mode != expected_mode:
        raise EmitError(f"--run-mode {args.run_mode!r} differs from {RUN_MODE_ENV}={expected_mode!r}")
    contracts = contracts.for_mode(args.run_mode)
    secondary = args.secondary_capability_id
    if len(set(secondary)) != len(secondary) or args.primary_capability_id in secondary:
        raise EmitError("capability ids must be unique (primary and each --secondary-capability-id)")
    primary = contracts.capability(args.primary_capability_id)
    op_base = []
    if args.operation_args:
        op_base.append(_json_object(args.operation_args, "--operation-args"))
    if args.operation_args_file:
        op_base.append(
            _json_object(_read(args.operation_args_file, "--operation-args-file"), "--operation-args-file")
        )
    record = {
        "schema_version": PATTERN_VERSION,
        "schema_key": contracts.boundary.key,
        "capabilities_schema_version": contracts.catalog.key,
        "stack": detect_stack(env),
        "probe": {
            "id": args.probe_name,
            "version": args.probe_version,
            "primary_capability_id": primary.id,
            "secondary_capability_ids": secondary,
        },
        "run": {"mode": args.run_mode, "workspace_root": workspace_root(env), "command": args.command},
        "operation": {
            "category": args.category,
            "verb": args.verb,
            "target": args.target,
            "args": _build_map(op_base, args, "args"),
        },
        "result": {
            "observed_result": args.status,
            "raw_exit_code": _exit_code(args.raw_exit_code),
            "errno": _nullable(args.errno),
            "message": _nullable(args.message),
            "error_detail": _nullable(args.error_detail),
        },
        "payload": _payload(args),
        "capability_context": {
            "primary": primary.snapshot(),
            "secondary": [contracts.capability(c).snapshot() for c in secondary],
        },
    }
    problems = contracts.problems(record)
    if problems:
        raise EmitError("record does not validate: " + "; ".join(problems))
    return record


def emit(argv: list[str], env: Mapping[str, str]) -> dict[str, Any]:
    """Parse `argv`, load the contracts it names, and return the validated record."""
    args = build_parser().parse_args(argv)
    contracts = load_contracts(args.catalog, args.boundary, env)
    return build_record(args, contracts, env)


def main() -> int:
    """Console script: exactly one JSON object on stdout, or one error line and exit 1."""
    try:
        record = emit(sys.argv[1:], os.environ)
    except (EmitError, ContractError, StackError) as exc:
        print(f"emit-record: error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    return 0
