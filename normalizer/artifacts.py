"""Typed models of every normalized archive member (the v0 contract).

Field order here is the serialized key order, so it follows the contract's
tables (`../shared/spec/runner-artifacts-v0.md`) and, for the members the
contract leaves to the reader, the upstream Rust types Assay deserializes
into (commit pinned in normalizer/upstream/README.md; file:line on each Struct).
Integer bounds are the Rust field widths (a u32 pid, an i64 return value),
so a value serde would refuse is refused here too. These Structs are the
source of the JSON Schemas in `schema/` (`make schemas` regenerates them,
and a test fails when the two drift apart); `assay-runner validate` decodes
with them, so a wrong type, a missing field, an unknown field or an unknown
enum value is reported with the field's path.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

import msgspec

_json = msgspec.json.Encoder()


def json_member(obj: msgspec.Struct) -> bytes:
    """A JSON member's bytes: compact JSON, fixed key order, one trailing newline."""
    return _json.encode(obj) + b"\n"


KERNEL_EVENT_SCHEMA: Final = "assay.runner.kernel_event.v0"
HEALTH_SCHEMA: Final = "assay.runner.observation_health.v0"
SURFACE_SCHEMA: Final = "assay.runner.capability_surface.v0"
CORRELATION_SCHEMA: Final = "assay.runner.correlation_report.v0"
MANIFEST_SCHEMA: Final = "assay.runner.archive_manifest.v0"
RUN_EVENT_SCHEMA: Final = "assay.runner.event.v0"
POLICY_EVENT_SCHEMA: Final = "assay.runner.policy_event.v0"
SDK_EVENT_SCHEMA: Final = "assay.runner.sdk_event.v0"

RUN_ID_PATTERN = r"^[A-Za-z0-9_-]+$"
"""Upstream's `is_safe_run_id` (crates/assay-runner-core/src/run.rs:216-220) and the
kernel line schema's run_id pattern. Python's `$` also matches before a final
newline, so code that checks a run id uses `re.fullmatch` (`is_safe_run_id`)."""
RunId = Annotated[str, msgspec.Meta(min_length=1, pattern=RUN_ID_PATTERN)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
U16 = Annotated[int, msgspec.Meta(ge=0, le=2**16 - 1)]
I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
NonBlank = Annotated[str, msgspec.Meta(pattern=r"\S")]
"""Upstream ingest trims strings and refuses empty ones (policy.rs:222-253, sdk.rs:186-220)."""

AccessMode = Literal["read", "write", "read_write", "unknown"]
OperationFlag = Literal["create", "truncate", "append", "exclusive"]
"""The kernel line schema's enum, in upstream's derivation order (kernel/decode.rs:113-128)."""
OpenStatus = Literal["success", "error"]
KernelLayer = Literal["complete", "partial_ringbuf_drops", "absent"]
PolicyLayer = Literal["present", "absent"]
SdkLayer = Literal["present", "self_reported", "absent"]
Correlation = Literal["clean", "partial", "failed"]
NetworkCoverage = Literal[
    "absent",
    "unknown",
    "connect_only",
    "datagram_peer_observed",
    "connect_and_datagram_peer_observed",
]
EndpointClaimScope = Literal["diagnostic_only", "not_applicable", "unknown"]
Note = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_]+: ")]
KindName = Annotated[
    str, msgspec.Meta(pattern=r"^(openat|connect|exec|file_blocked|connect_blocked|event_[0-9]+)$")
]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base: unknown fields are errors; optional fields are omitted when unset."""


class KernelEvent(_Strict):
    """One line of `layers/kernel.ndjson`.

    Upstream's `KernelLayerEvent` (crates/assay-runner-core/src/kernel.rs:33-64)
    and its line schema (normalizer/upstream/kernel-event-v0.schema.json). The
    structured `connect_blocked` fields (`cgroup_id` .. `rule_id`) are read,
    never written: our blocks carry the endpoint in `value`. `status` implies
    `return_value` (schema allOf/5), so a successful open carries neither
    (docs/artifacts.md, "Kernel open metadata").
    """

    schema: Literal["assay.runner.kernel_event.v0"]
    run_id: RunId
    seq: NonNegative
    pid: U32
    event_type: U32
    kind: KindName
    value: str | None
    cgroup_id: NonNegative | msgspec.UnsetType = msgspec.UNSET
    network_destination: str | msgspec.UnsetType = msgspec.UNSET
    network_port: U16 | msgspec.UnsetType = msgspec.UNSET
    rule_id: U32 | msgspec.UnsetType = msgspec.UNSET
    flags: NonNegative | msgspec.UnsetType = msgspec.UNSET
    mode: NonNegative | msgspec.UnsetType = msgspec.UNSET
    resolve: Annotated[int, msgspec.Meta(ge=1)] | msgspec.UnsetType = msgspec.UNSET
    return_value: I64 | msgspec.UnsetType = msgspec.UNSET
    access_mode: AccessMode | msgspec.UnsetType = msgspec.UNSET
    operation_flags: list[OperationFlag] | msgspec.UnsetType = msgspec.UNSET
    status: OpenStatus | msgspec.UnsetType = msgspec.UNSET


class ObservationHealth(_Strict):
    """`observation-health.json`."""

    schema: Literal["assay.runner.observation_health.v0"]
    run_id: RunId
    platform: str
    kernel_layer: KernelLayer
    ringbuf_drops: NonNegative
    policy_layer: PolicyLayer
    sdk_layer: SdkLayer
    cgroup_correlation: Correlation
    network_protocol_coverage: NetworkCoverage
    network_endpoint_claim_scope: EndpointClaimScope
    notes: list[Note]


class CapabilitySurface(_Strict):
    """`capability-surface.json`: every list is a sorted set."""

    schema: Literal["assay.runner.capability_surface.v0"]
    run_id: RunId
    filesystem_paths: list[str]
    network_endpoints: list[str]
    process_execs: list[str]
    mcp_tools: list[str]
    policy_decisions: list[str]


class Window(_Strict):
    """Inclusive runner-clock phase markers bounding a binding."""

    start: Annotated[str, msgspec.Meta(min_length=1)]
    end: Annotated[str, msgspec.Meta(min_length=1)]


class Binding(_Strict, kw_only=True):
    """One policy decision's tool call bound to the kernel evidence inside its window.

    Upstream `CorrelationBinding` (crates/assay-runner-schema/src/correlation.rs:20-28):
    `cgroup_id` is read, never written.
    """

    tool_call_id: Annotated[str, msgspec.Meta(min_length=1)]
    policy_decision: str | None
    cgroup_id: NonNegative | msgspec.UnsetType = msgspec.UNSET
    kernel_event_count: NonNegative
    window: Window


class CorrelationReport(_Strict):
    """`correlation-report.json`."""

    schema: Literal["assay.runner.correlation_report.v0"]
    run_id: RunId
    status: Correlation
    bindings: list[Binding]
    ambiguities: list[str]


RunEventType = Literal["run_started", "run_finished"]


class RunEvent(_Strict):
    """One line of `events.ndjson`: a runner phase marker, in runner order.

    Upstream writes `assay.runner.event.v0` lines of type `run_started` and
    `run_finished` (crates/assay-runner-core/src/run.rs:11, 166-209). Ours
    carry the marker and its order only: upstream's elapsed times would break
    byte-identical runs, and its command/env would carry the agent's argv.
    The optional fields are upstream's, read (so its archives validate) and
    never written.
    """

    schema: Literal["assay.runner.event.v0"]
    run_id: RunId
    seq: NonNegative
    type: RunEventType
    agent_shim: str | msgspec.UnsetType = msgspec.UNSET
    command: list[str] | msgspec.UnsetType = msgspec.UNSET
    env_keys: list[str] | msgspec.UnsetType = msgspec.UNSET
    exit_code: int | msgspec.UnsetType | None = msgspec.UNSET
    signal: int | msgspec.UnsetType | None = msgspec.UNSET
    success: bool | msgspec.UnsetType = msgspec.UNSET
    window_elapsed_ms: NonNegative | msgspec.UnsetType = msgspec.UNSET


class ManifestEntry(_Strict):
    """Digest and size of one archive member (uncompressed bytes)."""

    path: str
    sha256: Annotated[str, msgspec.Meta(pattern=r"^sha256:[0-9a-f]{64}$")]
    bytes: NonNegative


class Manifest(_Strict):
    """`manifest.json`: every other member, sorted by path."""

    schema: Literal["assay.runner.archive_manifest.v0"]
    run_id: RunId
    files: dict[str, ManifestEntry]


Decision = Literal["allow", "deny"]
TOOL_DECISION: Final = "assay.tool.decision"


class PolicyEvent(_Strict):
    """One line of `layers/policy.ndjson`: the policy decision for one tool call.

    Upstream `PolicyLayerEvent` (crates/assay-runner-core/src/policy.rs:11-21):
    every field required, strings non-empty. `source` names the enforcement
    layer that decided (docs/policy.md): `assay-runner://policy/tools` when the
    tool policy decided, `.../filesystem` or `.../network` when the call was
    allowed but the kernel blocked a file or connect inside its window.
    """

    schema: Literal["assay.runner.policy_event.v0"]
    run_id: RunId
    seq: NonNegative
    source_event_type: Literal["assay.tool.decision"]
    source: NonBlank
    tool_call_id: NonBlank
    tool: NonBlank
    decision: Decision


SdkEventType = Literal["tool_call_started", "tool_call_completed", "run_finished", "run_failed"]
"""The event types upstream ingests (crates/assay-runner-core/src/sdk.rs:229-234)."""


class SdkEvent(_Strict):
    """One line of `layers/sdk.ndjson`: what the agent reported over the SDK channel.

    Upstream `SdkLayerEvent` (crates/assay-runner-schema/src/sdk_event.rs:5-16).
    Self-reported by the agent's runtime (`sdk_layer: self_reported`); order
    is the runner's receipt order. SDK-side timestamps are never recorded.
    """

    schema: Literal["assay.runner.sdk_event.v0"]
    run_id: RunId
    seq: NonNegative
    event_type: SdkEventType
    source: NonBlank
    sdk_name: NonBlank | msgspec.UnsetType | None = msgspec.UNSET
    sdk_version: NonBlank | msgspec.UnsetType | None = msgspec.UNSET
    tool_call_id: NonBlank | msgspec.UnsetType | None = msgspec.UNSET
    tool: NonBlank | msgspec.UnsetType | None = msgspec.UNSET


RUN_ID_MAX = 128
"""The longest run id the runner accepts at any entry point (the archive and spool names carry it)."""


def is_safe_run_id(run_id: str) -> bool:
    """Upstream's `is_safe_run_id` (crates/assay-runner-core/src/run.rs:216-220), non-empty:
    the whole string is ASCII letters, digits, '_' and '-' (a trailing newline fails)."""
    return re.fullmatch(r"[A-Za-z0-9_-]+", run_id) is not None
