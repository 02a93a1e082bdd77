"""Typed models of every normalized archive member (the v0 contract).

Field order here is the serialized key order, so it follows the contract's
tables (`../shared/spec/runner-artifacts-v0.md`). These Structs are the
source of the JSON Schemas in `schema/` (`make schemas` regenerates them,
and a test fails when the two drift apart); `assay-runner validate` decodes
with them, so a wrong type, a missing field or an unknown enum value is
reported with the field's path.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

KERNEL_EVENT_SCHEMA = "assay.runner.kernel_event.v0"
HEALTH_SCHEMA = "assay.runner.observation_health.v0"
SURFACE_SCHEMA = "assay.runner.capability_surface.v0"
CORRELATION_SCHEMA = "assay.runner.correlation_report.v0"
MANIFEST_SCHEMA = "assay.runner.archive_manifest.v0"
PHASE_EVENT_SCHEMA = "assay.runner.phase_event.v0"
POLICY_EVENT_SCHEMA = "assay.runner.policy_event.v0"
SDK_EVENT_SCHEMA = "assay.runner.sdk_event.v0"

RunId = Annotated[str, msgspec.Meta(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]

AccessMode = Literal["read", "write", "read_write", "unknown"]
OperationFlag = Literal["append", "create", "directory", "exclusive", "tmpfile", "truncate"]
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
    """One line of `layers/kernel.ndjson`."""

    schema: Literal["assay.runner.kernel_event.v0"]
    run_id: RunId
    seq: NonNegative
    pid: NonNegative
    event_type: NonNegative
    kind: KindName
    value: str | None
    flags: int | msgspec.UnsetType = msgspec.UNSET
    mode: int | msgspec.UnsetType = msgspec.UNSET
    resolve: int | msgspec.UnsetType = msgspec.UNSET
    return_value: int | msgspec.UnsetType = msgspec.UNSET
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


class Binding(_Strict):
    """One tool call bound to the kernel evidence inside its window."""

    tool_call_id: Annotated[str, msgspec.Meta(min_length=1)]
    policy_decision: str | None
    kernel_event_count: NonNegative
    window: Window


class CorrelationReport(_Strict):
    """`correlation-report.json`."""

    schema: Literal["assay.runner.correlation_report.v0"]
    run_id: RunId
    status: Correlation
    bindings: list[Binding]
    ambiguities: list[str]


class PhaseEvent(_Strict):
    """One line of `events.ndjson`: a runner phase marker, in runner order.

    Markers carry names and order only; their runner-clock times stay in the
    raw spool, so the member is deterministic.
    """

    schema: Literal["assay.runner.phase_event.v0"]
    run_id: RunId
    seq: NonNegative
    phase: Annotated[str, msgspec.Meta(min_length=1)]


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


PolicySource = Literal["filesystem", "network", "tool"]
Decision = Literal["allow", "deny"]


class PolicyEvent(_Strict):
    """One line of `layers/policy.ndjson`: a policy decision the run hit.

    `summary` is the decision's entry in `capability-surface.json`'s
    `policy_decisions` (format in docs/policy.md), e.g. `allow:read_file`,
    `deny:shell`, `deny:file_write:/etc/hosts`, `deny:connect:10.0.0.1:443`.
    """

    schema: Literal["assay.runner.policy_event.v0"]
    run_id: RunId
    seq: NonNegative
    source: PolicySource
    decision: Decision
    target: str
    access: str
    rule: str
    tool_call_id: str | None
    summary: Annotated[str, msgspec.Meta(pattern=r"^(allow|deny):.+$")]


SdkEventName = Literal["sdk_hello", "tool_call_started", "tool_call_finished"]


class SdkEvent(_Strict):
    """One line of `layers/sdk.ndjson`: what the agent reported over the SDK channel.

    Self-reported by the agent's runtime (`sdk_layer: self_reported`); order
    is the runner's receipt order. SDK-side timestamps are never recorded.
    """

    schema: Literal["assay.runner.sdk_event.v0"]
    run_id: RunId
    seq: NonNegative
    event: SdkEventName
    sdk_name: str
    sdk_version: str
    tool: str | None
    tool_call_id: str | None
    status: str | None
