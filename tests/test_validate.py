"""`runner.evidence.validate` and `assay-runner validate`.

Each contract and Assay rule has a case that breaks a golden archive in
exactly one way (rebuilding the manifest unless the manifest is what is
broken) and asserts the exact problem lines, so a message change is a
visible decision. Kernel-only rules break `archive-minimal`; policy, SDK and
binding rules break `archive-sdk-policy`.
Hostile archives are built here and must be refused without writing.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from runner.evidence.archive import (
    MANIFEST,
    ArchiveError,
    archive_bytes,
    build_manifest,
    load_members,
    read_archive,
    sha256_ref,
)
from runner.evidence.validate import validate_members, validate_path
from tests.golden_edits import KERNEL, RUN_ID, Members, Obj, dump, golden, lines, remanifest, set_line

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_LAYERS = ROOT / "golden" / "archive-sdk-policy"
CLI = ROOT / ".venv" / "bin" / "assay-runner"
HEALTH = "observation-health.json"
SURFACE = "capability-surface.json"
CORRELATION = "correlation-report.json"
PHASES = "events.ndjson"
POLICY = "layers/policy.ndjson"
SDK = "layers/sdk.ndjson"
WORK = "/tmp/assay-runner/work"


# --- building broken archives ---------------------------------------------


def edit(name: str, change: Callable[[Obj], object]) -> Callable[[Members], Members]:
    """Mutation: change the JSON member `name` in place, then remanifest."""

    def mutate(m: Members) -> Members:
        doc = json.loads(m[name])
        change(doc)
        m[name] = dump(doc)
        return m if name == MANIFEST else remanifest(m)

    return mutate


def raw(name: str, data: bytes | None, manifest: bool = True) -> Callable[[Members], Members]:
    """Mutation: set (or with None, remove) member bytes; remanifest unless told not to."""

    def mutate(m: Members) -> Members:
        if data is None:
            del m[name]
        else:
            m[name] = data
        return remanifest(m) if manifest else m

    return mutate


def chain(*mutations: Callable[[Members], Members]) -> Callable[[Members], Members]:
    def mutate(m: Members) -> Members:
        for mutation in mutations:
            m = mutation(m)
        return m

    return mutate


def kernel_line(seq: int, event_type: int, kind: str, value: str | None) -> Obj:
    return {
        "schema": "assay.runner.kernel_event.v0",
        "run_id": RUN_ID,
        "seq": seq,
        "pid": 3,
        "event_type": event_type,
        "kind": kind,
        "value": value,
    }


def add_kernel(*events: tuple[int, str, str | None]) -> Callable[[Members], Members]:
    """Mutation: append kernel lines (seq continues the golden's 0..3)."""
    return lines(KERNEL, lambda xs: xs.extend(kernel_line(len(xs), t, k, v) for t, k, v in events))


def health(**fields: Any) -> Callable[[Members], Members]:
    return edit(HEALTH, lambda d: d.update(fields))


def manifest_entry(member: str, **fields: Any) -> Callable[[Members], Members]:
    return edit(MANIFEST, lambda d: d["files"][member].update(fields))


def _sorted_files(d: Obj, extra: Obj) -> None:
    d["files"] = dict(sorted({**d["files"], **extra}.items()))


def _entry(path: str, data: bytes) -> Obj:
    return {"path": path, "sha256": sha256_ref(data), "bytes": len(data)}


GOLDEN_MEMBERS = golden()
HEALTH_BYTES = len(GOLDEN_MEMBERS[HEALTH])
HEALTH_DIGEST = sha256_ref(GOLDEN_MEMBERS[HEALTH])
ZERO_DIGEST = "sha256:" + "0" * 64
AWS_KEY = "AKIA" + "ABCDEFGHIJKLMNOP"  # split: this file must not look like a leak itself
OUT = f"{WORK}/output.txt"


# --- one case per rule: (mutation, exact problem lines) ----------------------

CASES: dict[str, tuple[Callable[[Members], Members], list[str]]] = {
    # structure and manifest
    "manifest missing": (
        raw(MANIFEST, None, manifest=False),
        ["manifest.json: missing from the archive"],
    ),
    "manifest malformed": (
        raw(MANIFEST, b"{not json\n", manifest=False),
        ["manifest.json: JSON is malformed: object keys must be strings (byte 1)"],
    ),
    "manifest wrong type": (
        manifest_entry(HEALTH, bytes="434"),
        ["manifest.json: Expected `int`, got `str` - at `$.files[...].bytes`"],
    ),
    "member missing and unlisted": (
        raw(SDK, None),
        ["layers/sdk.ndjson: missing from the archive"],
    ),
    "member missing but listed": (
        raw(SDK, None, manifest=False),
        ["layers/sdk.ndjson: missing from the archive"],
    ),
    "extra member unlisted": (
        raw("notes.txt", b"hi\n", manifest=False),
        ["notes.txt: not a v0 archive member", "notes.txt: not listed in manifest.json"],
    ),
    "extra member listed": (raw("notes.txt", b"hi\n"), ["notes.txt: not a v0 archive member"]),
    "manifest lists an absent file": (
        edit(MANIFEST, lambda d: _sorted_files(d, {"ghost.txt": _entry("ghost.txt", b"")})),
        ["manifest.json: lists 'ghost.txt', which is not in the archive"],
    ),
    "manifest lists itself": (
        edit(MANIFEST, lambda d: _sorted_files(d, {MANIFEST: _entry(MANIFEST, b"")})),
        ["manifest.json: lists itself"],
    ),
    "manifest entry path differs from key": (
        manifest_entry(PHASES, path="other.ndjson"),
        ["manifest.json: files['events.ndjson'].path is 'other.ndjson', expected 'events.ndjson'"],
    ),
    "manifest files unsorted": (
        edit(MANIFEST, lambda d: d.update(files=dict(reversed(d["files"].items())))),
        ["manifest.json: files are not sorted by path"],
    ),
    "digest mismatch": (
        manifest_entry(HEALTH, sha256=ZERO_DIGEST),
        [f"observation-health.json: digest is {HEALTH_DIGEST}, manifest.json says {ZERO_DIGEST}"],
    ),
    "size mismatch": (
        manifest_entry(HEALTH, bytes=1),
        [f"observation-health.json: is {HEALTH_BYTES} bytes, manifest.json says 1"],
    ),
    # strict decoding
    "unknown field": (
        health(extra=1),
        ["observation-health.json: Object contains unknown field `extra`"],
    ),
    "wrong type names the field": (
        edit(SURFACE, lambda d: d.update(process_execs="/usr/bin/cat")),
        ["capability-surface.json: Expected `array`, got `str` - at `$.process_execs`"],
    ),
    "unknown enum value": (
        health(kernel_layer="partial"),
        ["observation-health.json: Invalid enum value 'partial' - at `$.kernel_layer`"],
    ),
    "kernel line decode error names the line": (
        set_line(KERNEL, 2, seq="2"),
        ["layers/kernel.ndjson: line 3: Expected `int`, got `str` - at `$.seq`"],
    ),
    "kernel line not an object": (
        lines(KERNEL, lambda xs: xs.__setitem__(1, "garbage")),
        ["layers/kernel.ndjson: line 2: Expected `object`, got `str`"],
    ),
    "kernel line malformed": (
        raw(KERNEL, GOLDEN_MEMBERS[KERNEL].replace(b"\n", b"\ngarbage\n", 1)),
        [
            "layers/kernel.ndjson: line 2: JSON is malformed: invalid character (byte 0)",
            "layers/kernel.ndjson: line 3: seq is 1, expected 2",
        ],
    ),
    "blank lines are skipped": (
        raw(KERNEL, GOLDEN_MEMBERS[KERNEL].replace(b"\n", b"\n\n", 1) + b"\n"),
        [],
    ),
    "seq shifted by a missing line is reported once": (
        lines(KERNEL, lambda xs: xs.pop(1)),
        [
            "layers/kernel.ndjson: line 2: seq is 2, expected 1",
            f"capability-surface.json: filesystem_paths has '{WORK}/output.txt', which no "
            "layers/kernel.ndjson line carries",
        ],
    ),
    "seq counted from 1 is reported once": (
        lines(KERNEL, lambda xs: [x.update(seq=x["seq"] + 1) for x in xs]),
        ["layers/kernel.ndjson: line 1: seq is 1, expected 0"],
    ),
    "note without code prefix": (
        edit(HEALTH, lambda d: d["notes"].append("free text")),
        [
            "observation-health.json: Expected `str` matching regex '^[a-z0-9_]+: ' "
            f"- at `$.notes[{len(json.loads(GOLDEN_MEMBERS[HEALTH])['notes'])}]`"  # the appended one
        ],
    ),
    # run_id
    "empty run_id": (
        health(run_id=""),
        ["observation-health.json: Expected `str` of length >= 1 - at `$.run_id`"],
    ),
    "artifact run_id differs": (
        edit(SURFACE, lambda d: d.update(run_id="run_other")),
        ["capability-surface.json: run_id 'run_other' differs from 'run_minimal' in manifest.json"],
    ),
    "kernel line run_id differs": (
        set_line(KERNEL, 1, run_id="run_other"),
        [
            "layers/kernel.ndjson: line 2: run_id 'run_other' differs from 'run_minimal' "
            "in manifest.json"
        ],
    ),
    "phase line run_id differs": (
        set_line(PHASES, 1, run_id="run_other"),
        ["events.ndjson: line 2: run_id 'run_other' differs from 'run_minimal' in manifest.json"],
    ),
    "run_id with a dot": (
        health(run_id="run.minimal"),
        ["observation-health.json: Expected `str` matching regex '^[A-Za-z0-9_-]+$' - at `$.run_id`"],
    ),
    "run_id with a trailing newline everywhere": (
        chain(*(edit(n, lambda d: d.update(run_id=RUN_ID + "\n")) for n in (SURFACE, CORRELATION, HEALTH)),
              *(lines(n, lambda xs: [x.update(run_id=RUN_ID + "\n") for x in xs]) for n in (KERNEL, PHASES)),
              edit(MANIFEST, lambda d: d.update(run_id=RUN_ID + "\n"))),
        ["manifest.json: run_id 'run_minimal\\n' is not only ASCII letters, digits, '_' and '-'"],
    ),
    "sdk line not an object": (
        raw(SDK, b"[1]\n"),
        ["layers/sdk.ndjson: line 1: Expected `object`, got `array`"],
    ),
    "phase event in the old shape": (
        lines(PHASES, lambda xs: xs[0].update(schema="assay.runner.phase_event.v0", phase=xs[0].pop("type"))),
        ["events.ndjson: line 1: Invalid enum value 'assay.runner.phase_event.v0' - at `$.schema`"],
    ),
    "upstream's own run event fields are read": (
        lines(PHASES, lambda xs: (xs[0].update(agent_shim="none", command=["true"], env_keys=[],
                                               window_elapsed_ms=0),
                                  xs[1].update(exit_code=0, signal=None, success=True, window_elapsed_ms=3))),
        [],
    ),
    "phase event type upstream does not write": (
        set_line(PHASES, 0, type="command_exited"),
        ["events.ndjson: line 1: Invalid enum value 'command_exited' - at `$.type`"],
    ),
    # observation health
    "drops require partial_ringbuf_drops": (
        health(ringbuf_drops=3),
        [
            "observation-health.json: ringbuf_drops 3 requires kernel_layer "
            "'partial_ringbuf_drops' (got 'complete')"
        ],
    ),
    "partial_ringbuf_drops requires drops": (
        health(kernel_layer="partial_ringbuf_drops", network_protocol_coverage="unknown",
               network_endpoint_claim_scope="unknown"),
        [
            "observation-health.json: kernel_layer 'partial_ringbuf_drops' requires "
            "ringbuf_drops > 0 (got 0)"
        ],
    ),
    "non-linux requires kernel_layer absent": (
        health(platform="macos"),
        [
            "observation-health.json: platform 'macos' requires kernel_layer "
            "'absent' (got 'complete')"
        ],
    ),
    "coverage absent requires scope not_applicable": (
        health(network_endpoint_claim_scope="diagnostic_only"),
        [
            "observation-health.json: network_protocol_coverage 'absent' requires "
            "network_endpoint_claim_scope 'not_applicable' (got 'diagnostic_only')"
        ],
    ),
    "coverage unknown requires scope unknown": (
        health(network_protocol_coverage="unknown", network_endpoint_claim_scope="not_applicable"),
        [
            "observation-health.json: network_protocol_coverage 'unknown' requires "
            "network_endpoint_claim_scope 'unknown' (got 'not_applicable')"
        ],
    ),
    "connect lines require connect coverage": (
        chain(
            add_kernel((20, "connect_blocked", "198.51.100.7:22")),
            edit(SURFACE, lambda d: d.update(network_endpoints=["198.51.100.7:22"])),
        ),
        [
            "observation-health.json: network_protocol_coverage 'absent' does not match "
            "layers/kernel.ndjson (1 connect/connect_blocked, 0 event_6/event_7 lines: "
            "expected 'connect_only')"
        ],
    ),
    "datagram lines require datagram coverage": (
        chain(
            add_kernel((2, "connect", None), (6, "event_6", "203.0.113.53:53")),
            edit(SURFACE, lambda d: d.update(network_endpoints=["203.0.113.53:53"])),
            health(
                network_protocol_coverage="connect_only",
                network_endpoint_claim_scope="diagnostic_only",
            ),
        ),
        [
            "observation-health.json: network_protocol_coverage 'connect_only' does not match "
            "layers/kernel.ndjson (1 connect/connect_blocked, 1 event_6/event_7 lines: "
            "expected 'connect_and_datagram_peer_observed')"
        ],
    ),
    "claimed coverage needs kernel lines": (
        health(
            network_protocol_coverage="datagram_peer_observed",
            network_endpoint_claim_scope="diagnostic_only",
        ),
        [
            "observation-health.json: network_protocol_coverage 'datagram_peer_observed' does "
            "not match layers/kernel.ndjson (0 connect/connect_blocked, 0 event_6/event_7 "
            "lines: expected 'absent')"
        ],
    ),
    "unknown coverage is allowed with any lines": (
        chain(
            add_kernel((7, "event_7", "[2001:db8::1]:443")),
            edit(SURFACE, lambda d: d.update(network_endpoints=["[2001:db8::1]:443"])),
            health(network_protocol_coverage="unknown", network_endpoint_claim_scope="unknown"),
        ),
        [],
    ),
    # kernel lines
    "seq out of order": (
        set_line(KERNEL, 2, seq=7),
        ["layers/kernel.ndjson: line 3: seq is 7, expected 2"],
    ),
    "kind does not match event_type": (
        set_line(KERNEL, 1, event_type=10),
        [
            "layers/kernel.ndjson: line 2: line schema: 1 was expected - at `$.event_type` "
            "(schema allOf/0/then/properties/event_type/const)",
            "layers/kernel.ndjson: line 2: kind 'openat' does not match event_type "
            "10 (expected 'file_blocked')",
        ],
    ),
    "unknown id must be event_N": (
        add_kernel((999, "event_998", None)),
        [
            "layers/kernel.ndjson: line 5: kind 'event_998' does not match "
            "event_type 999 (expected 'event_999')"
        ],
    ),
    "known id must not be event_N": (
        lines(KERNEL, lambda xs: xs[0].update(kind="event_4")),
        [
            "layers/kernel.ndjson: line 1: kind 'event_4' does not match "
            "event_type 4 (expected 'exec')"
        ],
    ),
    "access_mode does not match flags": (
        set_line(KERNEL, 1, access_mode="read"),
        [
            "layers/kernel.ndjson: line 2: access_mode 'read' does not match flags 577 "
            "(flags & 3 = 1: expected 'write')"
        ],
    ),
    "status does not match return_value": (
        set_line(KERNEL, 3, return_value=-13, status="success"),
        [
            "layers/kernel.ndjson: line 4: status 'success' does not match return_value -13 "
            "(expected 'error')"
        ],
    ),
    "operation_flags not in Assay's order": (
        set_line(KERNEL, 1, operation_flags=["truncate", "create"]),
        [
            "layers/kernel.ndjson: line 2: operation_flags ['truncate', 'create'] do not match "
            "flags 0o1101 (Assay derives ['create', 'truncate'])"
        ],
    ),
    "operation_flags duplicated": (
        set_line(KERNEL, 1, operation_flags=["create", "create", "truncate"]),
        [
            "layers/kernel.ndjson: line 2: line schema: ['create', 'create', 'truncate'] has "
            "non-unique elements - at `$.operation_flags` (schema properties/operation_flags/uniqueItems)",
            "layers/kernel.ndjson: line 2: operation_flags ['create', 'create', 'truncate'] do not "
            "match flags 0o1101 (Assay derives ['create', 'truncate'])",
        ],
    ),
    "operation flag outside Assay's enum": (
        set_line(KERNEL, 1, operation_flags=["create", "truncate", "directory"]),
        ["layers/kernel.ndjson: line 2: Invalid enum value 'directory' - at `$.operation_flags[2]`"],
    ),
    "status without return_value": (
        set_line(KERNEL, 1, status="success"),
        [
            "layers/kernel.ndjson: line 2: line schema: 'return_value' is a required property "
            "- at `$` (schema allOf/5/then/required)"
        ],
    ),
    "loader telemetry in the kernel layer": (
        chain(add_kernel((1, "openat", "/etc/ld.so.cache")),
              edit(SURFACE, lambda d: d.update(filesystem_paths=sorted([*d["filesystem_paths"],
                                                                        "/etc/ld.so.cache"])))),
        [
            "layers/kernel.ndjson: line 5: openat of '/etc/ld.so.cache' is loader telemetry Assay "
            "filters out (kernel.rs:185-196)"
        ],
    ),
    "an unredacted secret in a kernel value": (
        chain(add_kernel((1, "openat", f"/tmp/{AWS_KEY}")),
              edit(SURFACE, lambda d: d.update(filesystem_paths=sorted([*d["filesystem_paths"],
                                                                        f"/tmp/{AWS_KEY}"])))),
        [
            "capability-surface.json: unredacted aws-access-key-id-shaped value: refused by Assay's "
            "fail-closed sweep",
            "layers/kernel.ndjson: line 5: unredacted aws-access-key-id-shaped value: refused by "
            "Assay's fail-closed sweep",
        ],
    ),
    "a redacted secret is fine": (
        chain(add_kernel((1, "openat", "/tmp/<redacted:aws-access-key-id:0123abcd>")),
              edit(SURFACE, lambda d: d.update(filesystem_paths=sorted(
                  [*d["filesystem_paths"], "/tmp/<redacted:aws-access-key-id:0123abcd>"])))),
        [],
    ),
    "phase seq out of order": (
        set_line(PHASES, 0, seq=1),
        ["events.ndjson: line 1: seq is 1, expected 0"],
    ),
    # capability surface
    "surface set unsorted": (
        edit(SURFACE, lambda d: d["process_execs"].reverse()),
        [
            "capability-surface.json: process_execs is not sorted: '/usr/bin/cat' "
            "after '/usr/bin/sh'"
        ],
    ),
    "surface set duplicated": (
        edit(SURFACE, lambda d: d["filesystem_paths"].append(OUT)),
        [f"capability-surface.json: filesystem_paths has duplicate '{OUT}'"],
    ),
    "surface lacks an openat path": (
        edit(SURFACE, lambda d: d["filesystem_paths"].remove(OUT)),
        [
            f"capability-surface.json: filesystem_paths lacks '{OUT}' (openat at "
            "layers/kernel.ndjson line 2)"
        ],
    ),
    "surface lacks a file_blocked path": (
        add_kernel((10, "file_blocked", "/root/.ssh/id_ed25519")),
        [
            "capability-surface.json: filesystem_paths lacks '/root/.ssh/id_ed25519' "
            "(file_blocked at layers/kernel.ndjson line 5)"
        ],
    ),
    "surface lacks an exec": (
        edit(SURFACE, lambda d: d.update(process_execs=["/usr/bin/cat"])),
        [
            "capability-surface.json: process_execs lacks '/usr/bin/sh' (exec at "
            "layers/kernel.ndjson line 1)"
        ],
    ),
    "surface lacks an endpoint": (
        chain(
            add_kernel((2, "connect", "192.0.2.10:443"), (2, "connect", "192.0.2.10:443")),
            health(
                network_protocol_coverage="connect_only",
                network_endpoint_claim_scope="diagnostic_only",
            ),
        ),
        [
            "capability-surface.json: network_endpoints lacks '192.0.2.10:443' "
            "(connect at layers/kernel.ndjson line 5)"
        ],
    ),
    "null values need no surface entry": (
        chain(
            add_kernel((2, "connect", None), (1, "openat", None)),
            health(
                network_protocol_coverage="connect_only",
                network_endpoint_claim_scope="diagnostic_only",
            ),
        ),
        [],
    ),
    # correlation
    "clean correlation with ambiguities": (
        edit(CORRELATION, lambda d: d.update(ambiguities=["tool_call_without_id: read_file"])),
        ["correlation-report.json: status 'clean' requires no ambiguities (got 1)"],
    ),
    "partial correlation without ambiguities": (
        edit(CORRELATION, lambda d: d.update(status="partial")),
        ["correlation-report.json: status 'partial' requires at least one ambiguity"],
    ),
    "failed cgroup correlation": (
        health(cgroup_correlation="failed"),
        ["observation-health.json: cgroup_correlation 'failed' is refused by Assay (health.rs:231-248)"],
    ),
    "surface value no kernel line carries": (
        edit(SURFACE, lambda d: d.update(process_execs=["/usr/bin/cat", "/usr/bin/env", "/usr/bin/sh"])),
        [
            "capability-surface.json: process_execs has '/usr/bin/env', which no "
            "layers/kernel.ndjson line carries"
        ],
    ),
}

# --- policy, SDK and binding rules, on the archive with tool calls -----------

LAYER_CASES: dict[str, tuple[Callable[[Members], Members], list[str]]] = {
    "binding decision differs from its policy line": (
        edit(CORRELATION, lambda d: d["bindings"][2].update(policy_decision="allow")),
        [
            "correlation-report.json: 5 bindings for 5 policy lines: lines without their binding "
            "[('tc_003', 'deny')], bindings without their line [('tc_003', 'allow')]"
        ],
    ),
    "a policy line without its binding": (
        edit(CORRELATION, lambda d: d["bindings"].pop(4)),
        [
            "correlation-report.json: 4 bindings for 5 policy lines: lines without their binding "
            "[('tc_005', 'deny')], bindings without their line []",
            "correlation-report.json: SDK tool_call_id 'tc_005' has no binding and no "
            "'sdk_tool_call_without_policy_binding:tc_005' ambiguity",
        ],
    ),
    "duplicate binding ids": (
        edit(CORRELATION, lambda d: d["bindings"][1].update(tool_call_id="tc_001")),
        [
            "correlation-report.json: bindings repeat tool_call_id ['tc_001']: the capability diff "
            "refuses the report",
            "correlation-report.json: 5 bindings for 5 policy lines: lines without their binding "
            "[('tc_002', 'allow')], bindings without their line []",
            "correlation-report.json: SDK tool_call_id 'tc_002' has no binding and no "
            "'sdk_tool_call_without_policy_binding:tc_002' ambiguity",
        ],
    ),
    "policy decision that is not decision:tool": (
        edit(SURFACE, lambda d: d.update(policy_decisions=sorted(
            [*d["policy_decisions"], "deny:connect:127.0.0.1:9999"]))),
        [
            "capability-surface.json: policy_decisions are not `{decision}:{tool}` of the policy "
            "lines (e.g. ['deny:connect:127.0.0.1:9999'])"
        ],
    ),
    "mcp tool without a policy line": (
        edit(SURFACE, lambda d: d.update(mcp_tools=sorted([*d["mcp_tools"], "search"]))),
        [
            "capability-surface.json: mcp_tools ['connect', 'read_file', 'search', 'shell'] are not "
            "the policy lines' tools ['connect', 'read_file', 'shell', 'write_file']"
        ],
    ),
    "policy line without source_event_type": (
        lines(POLICY, lambda xs: xs[0].pop("source_event_type")),
        ["layers/policy.ndjson: line 1: Object missing required field `source_event_type`"],
    ),
    "policy line with a null tool_call_id": (
        set_line(POLICY, 0, tool_call_id=None),
        ["layers/policy.ndjson: line 1: Expected `str`, got `null` - at `$.tool_call_id`"],
    ),
    "policy line with a blank tool": (
        set_line(POLICY, 0, tool=" "),
        [r"layers/policy.ndjson: line 1: Expected `str` matching regex '\\S' - at `$.tool`"],
    ),
    "policy line with a field of its own": (
        set_line(POLICY, 0, summary="allow:read_file"),
        ["layers/policy.ndjson: line 1: Object contains unknown field `summary`"],
    ),
    "policy line run_id differs": (
        set_line(POLICY, 1, run_id="run_other"),
        ["layers/policy.ndjson: line 2: run_id 'run_other' differs from 'run_sdk_policy' in manifest.json"],
    ),
    "policy layer present without lines": (
        chain(raw(POLICY, b""), edit(CORRELATION, lambda d: d.update(bindings=[])),
              edit(SURFACE, lambda d: d.update(mcp_tools=[], policy_decisions=[]))),
        ["observation-health.json: policy_layer 'present' but layers/policy.ndjson has 0 lines"],
    ),
    "sdk line in the old shape": (
        lines(SDK, lambda xs: xs[0].update(event=xs[0].pop("event_type"))),
        ["layers/sdk.ndjson: line 1: Object contains unknown field `event`"],
    ),
    "sdk event type upstream does not accept": (
        set_line(SDK, 0, event_type="tool_call_finished"),
        ["layers/sdk.ndjson: line 1: Invalid enum value 'tool_call_finished' - at `$.event_type`"],
    ),
    "sdk tool call without its tool": (
        lines(SDK, lambda xs: xs[0].pop("tool")),
        ["layers/sdk.ndjson: line 1: event_type tool_call_started requires tool"],
    ),
    "sdk lines naming two runtimes": (
        set_line(SDK, 0, sdk_name="other-runtime"),
        [
            "layers/sdk.ndjson: lines name 2 (sdk_name, sdk_version) pairs: "
            "[('assay-fixture-agent', '1'), ('other-runtime', '1')]"
        ],
    ),
    "sdk call without binding and without its ambiguity": (
        chain(lines(SDK, lambda xs: [x.update(tool_call_id="tc_999") for x in xs[:2]])),
        [
            "correlation-report.json: SDK tool_call_id 'tc_999' has no binding and no "
            "'sdk_tool_call_without_policy_binding:tc_999' ambiguity"
        ],
    ),
    "cgroup_id on a binding with several decisions": (
        edit(CORRELATION, lambda d: d["bindings"][0].update(cgroup_id=7)),
        ["correlation-report.json: bindings [0] carry cgroup_id with 5 policy lines"],
    ),
}


def test_golden_archive_is_valid() -> None:
    assert validate_members(golden()) == []


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_rule(case: str) -> None:
    mutate, expected = CASES[case]
    assert validate_members(mutate(golden())) == expected


def test_golden_archive_with_tool_calls_is_valid() -> None:
    assert validate_members(load_members(GOLDEN_LAYERS)) == []


@pytest.mark.parametrize("case", LAYER_CASES, ids=list(LAYER_CASES))
def test_layer_rule(case: str) -> None:
    mutate, expected = LAYER_CASES[case]
    assert validate_members(mutate(load_members(GOLDEN_LAYERS))) == expected


def test_every_problem_is_reported_in_a_stable_order() -> None:
    broken = chain(
        health(ringbuf_drops=2),
        set_line(KERNEL, 0, seq=5),
        edit(SURFACE, lambda d: d.update(run_id="run_other")),
        edit(CORRELATION, lambda d: d.update(ambiguities=["x: y"])),
        manifest_entry(PHASES, bytes=0),
    )(golden())
    assert validate_members(broken) == [
        "correlation-report.json: status 'clean' requires no ambiguities (got 1)",
        "layers/kernel.ndjson: line 1: seq is 5, expected 0",
        "observation-health.json: ringbuf_drops 2 requires kernel_layer "
        "'partial_ringbuf_drops' (got 'complete')",
        f"events.ndjson: is {len(broken[PHASES])} bytes, manifest.json says 0",
        "capability-surface.json: run_id 'run_other' differs from 'run_minimal' in manifest.json",
    ]


def test_manifest_run_id_is_the_reference() -> None:
    members = golden()
    members[MANIFEST] = build_manifest(
        "run_other", {k: v for k, v in members.items() if k != MANIFEST}
    )
    problems = validate_members(members)
    assert problems[0] == (
        "capability-surface.json: run_id 'run_minimal' differs from 'run_other' in manifest.json"
    )
    # surface, correlation, health, and every phase and kernel line
    assert len(problems) == 3 + 2 + 4


def test_undecodable_kernel_layer_skips_cross_checks() -> None:
    """A broken layer gives its decode error, not a cascade of coverage lines."""
    members = chain(
        add_kernel((2, "connect", "192.0.2.10:443")),
        set_line(KERNEL, 0, pid=-1),
    )(golden())
    assert validate_members(members) == [
        "layers/kernel.ndjson: line 1: Expected `int` >= 0 - at `$.pid`"
    ]


# --- archives on disk ------------------------------------------------------


def write_tar(path: Path, entries: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    """A .tar.gz with exactly these headers (and data), however hostile."""
    raw_tar = io.BytesIO()
    with tarfile.open(fileobj=raw_tar, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path.write_bytes(gzip.compress(raw_tar.getvalue(), mtime=0))
    return path


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.devmajor, info.devminor = 1, 3
    return info, None


def huge_declared(path: Path) -> Path:
    """A member whose header claims 4 GiB while the stream holds a few bytes."""
    info = tarfile.TarInfo("observation-health.json")
    info.size = 4 << 30
    header = info.tobuf(tarfile.GNU_FORMAT)
    path.write_bytes(gzip.compress(header + b"\0" * 1024, mtime=0))
    return path


def golden_tar(path: Path) -> Path:
    members = {k: v for k, v in golden().items() if k != MANIFEST}
    path.write_bytes(archive_bytes(RUN_ID, members))
    return path


def test_archive_written_by_the_runner_is_valid(tmp_path: Path) -> None:
    report = validate_path(golden_tar(tmp_path / "run.tar.gz"))
    assert (report.valid, report.members, report.run_id) == (True, 8, RUN_ID)


def test_manifest_must_come_first_in_a_tar(tmp_path: Path) -> None:
    members = golden()
    entries = [regular(name, members[name]) for name in sorted(members)]
    report = validate_path(write_tar(tmp_path / "late.tar.gz", entries))
    assert [str(p) for p in report.problems] == ["archive: manifest.json is not the first member"]


PASSWD_PAYLOAD = b"root::0:0:assay-runner hostile archive test:/:/bin/sh\n"
HOSTILE: dict[str, tuple[Callable[[Path], Path], str]] = {
    "parent traversal": (
        lambda p: write_tar(p, [regular("manifest.json", b"{}\n"), regular("../x", b"pwned\n")]),
        "unsafe member name '../x'",
    ),
    "absolute name": (
        lambda p: write_tar(p, [regular("/etc/passwd", PASSWD_PAYLOAD)]),
        "unsafe member name '/etc/passwd'",
    ),
    "symlink": (
        lambda p: write_tar(p, [special("layers", tarfile.SYMTYPE, "/etc")]),
        "member 'layers' is not a regular file",
    ),
    "hardlink": (
        lambda p: write_tar(p, [special("manifest.json", tarfile.LNKTYPE, "/etc/passwd")]),
        "member 'manifest.json' is not a regular file",
    ),
    "device": (
        lambda p: write_tar(p, [special("observation-health.json", tarfile.CHRTYPE)]),
        "member 'observation-health.json' is not a regular file",
    ),
    "duplicate member": (
        lambda p: write_tar(p, [regular(MANIFEST, b"{}\n"), regular(MANIFEST, b"[]\n")]),
        "member 'manifest.json' appears twice",
    ),
    "too many members": (
        lambda p: write_tar(p, [regular(f"m{i:02}.json", b"{}\n") for i in range(65)]),
        "more than 64 members",
    ),
    "huge declared size": (
        huge_declared,
        "member 'observation-health.json' is 4294967296 bytes, more than the limit for a member "
        "manifest.json does not declare (1048576 bytes)",
    ),
}


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in root.rglob("*")}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_hostile_archive_is_refused_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    build, reason = HOSTILE[case]
    work = tmp_path / "work"
    work.mkdir()
    archive = build(work / "evil.tar.gz")
    before = _snapshot(tmp_path)

    with pytest.raises(ArchiveError, match=f"^{re.escape(reason)}$"):
        validate_path(archive)
    with pytest.raises(ArchiveError):
        read_archive(archive)
    result = subprocess.run(
        [str(CLI), "validate", archive.name], cwd=work, capture_output=True, text=True, check=False
    )

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"assay-runner: error: cannot validate evil.tar.gz: {reason}\n"
    assert _snapshot(tmp_path) == before
    assert not (tmp_path / "x").exists()
    # the payload, not the file's metadata: other tests may add users to /etc/passwd meanwhile
    assert PASSWD_PAYLOAD not in Path("/etc/passwd").read_bytes()


# --- the command line ------------------------------------------------------


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), "validate", *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def broken_dir(tmp_path: Path) -> Path:
    members = health(ringbuf_drops=3)(golden())
    members = set_line(KERNEL, 2, seq=9)(members)
    for name, data in members.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    return tmp_path


BROKEN_LINES = [
    "layers/kernel.ndjson: line 3: seq is 9, expected 2",
    "observation-health.json: ringbuf_drops 3 requires kernel_layer 'partial_ringbuf_drops' "
    "(got 'complete')",
]


def test_cli_valid_directory_exits_0() -> None:
    result = cli("golden/archive-minimal")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "OK golden/archive-minimal: 8 members, run_id=run_minimal\n"


def test_cli_valid_archive_exits_0(tmp_path: Path) -> None:
    golden_tar(tmp_path / "run.tar.gz")
    result = cli("run.tar.gz", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (
        0,
        "OK run.tar.gz: 8 members, run_id=run_minimal\n",
    )


def test_cli_invalid_exits_1_with_every_problem(tmp_path: Path) -> None:
    result = cli(str(broken_dir(tmp_path)))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [*BROKEN_LINES, "INVALID: 2 problems"]


def test_cli_singular_count(tmp_path: Path) -> None:
    archive = tmp_path / "one.tar.gz"
    members = {k: v for k, v in health(ringbuf_drops=3)(golden()).items() if k != MANIFEST}
    archive.write_bytes(archive_bytes(RUN_ID, members))
    result = cli(str(archive))
    assert (result.returncode, result.stdout.splitlines()[-1]) == (1, "INVALID: 1 problem")


def test_cli_json_report(tmp_path: Path) -> None:
    result = cli("--json", str(broken_dir(tmp_path)))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report == {
        "path": str(tmp_path),
        "valid": False,
        "members": 8,
        "run_id": RUN_ID,
        "problems": [
            {"member": KERNEL, "message": "seq is 9, expected 2", "line": 3},
            {
                "member": HEALTH,
                "message": BROKEN_LINES[1].removeprefix(f"{HEALTH}: "),
                "line": None,
            },
        ],
    }
    ok = json.loads(cli("--json", "golden/archive-minimal").stdout)
    assert (ok["valid"], ok["problems"], ok["run_id"]) == (True, [], RUN_ID)


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "no such file or directory"), (b"not a gzip stream", "not a gzip file")],
    ids=["missing", "corrupt"],
)
def test_cli_unreadable_input_exits_2(tmp_path: Path, content: bytes | None, reason: str) -> None:
    target = tmp_path / "run.tar.gz"
    if content is not None:
        target.write_bytes(content)
    result = cli("run.tar.gz", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"assay-runner: error: cannot validate run.tar.gz: {reason}\n"
    as_json = cli("--json", "run.tar.gz", cwd=tmp_path)
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout) == {"path": "run.tar.gz", "valid": False, "error": reason}
