"""Rules for `layers/kernel.ndjson`, each from Assay at base.UPSTREAM.

Per line: the published line schema (normalizer/upstream/kernel-event-v0.schema.json,
applied by upstream.kernel_schema_errors), the kind for each event_type, the
open metadata's derivations, and the loader telemetry upstream filters out.
Across members: network coverage and the capability surface versus the lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from normalizer.artifacts import CapabilitySurface, KernelEvent, ObservationHealth
from runner.evidence.conformance.base import HEALTH, KERNEL, SURFACE, Problem
from runner.evidence.conformance.upstream import kernel_schema_errors

KIND_BY_EVENT_TYPE = {1: "openat", 2: "connect", 4: "exec", 10: "file_blocked", 20: "connect_blocked"}
"""crates/assay-runner-core/src/kernel/decode.rs:24-35; docs/reference/runner/artifacts-v0.md:96-107."""
ACCESS_MODES = ("read", "write", "read_write", "unknown")
"""flags & O_ACCMODE -> access_mode: kernel/decode.rs:104-111."""
OPERATION_BITS = (("create", 0o100), ("truncate", 0o1000), ("append", 0o2000), ("exclusive", 0o400))
"""operation_flags as upstream derives them, in its order: kernel/decode.rs:113-128
(sic: `exclusive` is bit 0o400, which is O_NOCTTY on Linux)."""
SURFACE_IDS = {"filesystem_paths": (1, 10), "network_endpoints": (2, 20, 6, 7), "process_execs": (4,)}
"""Surface set -> event_types whose values fill it: kernel.rs:198-210 (6 sendto, 7 sendmsg)."""
CONNECT_IDS, DATAGRAM_IDS = (2, 20), (6, 7)
"""Network coverage evidence: kernel/health.rs:8-25 (connect vs sendto/sendmsg hooks)."""


def is_loader_telemetry(path: str) -> bool:
    """Upstream's `is_loader_telemetry_path` (kernel/decode.rs:170-196): filtered out of the layer."""
    so = path.endswith(".so") or ".so." in path
    return (
        path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/ssl/openssl.cnf", "/usr/pyvenv.cfg",
                 "/usr/bin/pyvenv.cfg", "/usr/bin/python3._pth", "/usr/bin/python3.12._pth",
                 "/usr/bin/pybuilddir.txt")
        or path.startswith(("/lib/", "/lib32/", "/lib64/", "/usr/lib/", "/usr/share/locale/",
                            "/proc/", "/sys/", "/dev/"))
        or "/node_modules/" in path
        or ("/.rustup/toolchains/" in path and so)
        or ("/target/" in path and any(d in path for d in ("/build/", "/debug/", "/release/")) and so)
    )


def line_rules(e: KernelEvent) -> Iterator[str]:
    """One kernel line against the published schema and upstream's decoder."""
    for error in kernel_schema_errors(e):
        yield f"line schema: {error}"
    expected = KIND_BY_EVENT_TYPE.get(e.event_type, f"event_{e.event_type}")
    if e.kind != expected:  # decode.rs:24-35
        yield f"kind {e.kind!r} does not match event_type {e.event_type} (expected {expected!r})"
    if e.flags is not msgspec.UNSET:
        if e.access_mode is not msgspec.UNSET and e.access_mode != ACCESS_MODES[e.flags & 3]:
            yield (f"access_mode {e.access_mode!r} does not match flags {e.flags} "
                   f"(flags & 3 = {e.flags & 3}: expected {ACCESS_MODES[e.flags & 3]!r})")
        if e.operation_flags is not msgspec.UNSET:
            derived = [name for name, bit in OPERATION_BITS if e.flags & bit]
            if e.operation_flags != derived:
                yield (f"operation_flags {e.operation_flags} do not match flags {e.flags:#o} "
                       f"(Assay derives {derived})")
    if e.return_value is not msgspec.UNSET and e.status is not msgspec.UNSET:
        derived_status = "success" if e.return_value >= 0 else "error"
        if e.status != derived_status:  # decode.rs:70-77
            yield (f"status {e.status!r} does not match return_value {e.return_value} "
                   f"(expected {derived_status!r})")
    if e.kind == "openat" and e.value is not None and is_loader_telemetry(e.value):
        yield f"openat of {e.value!r} is loader telemetry Assay filters out (kernel.rs:185-196)"


def _network_evidence(kernel: list[tuple[int, Any]]) -> tuple[int, int]:
    connects = sum(1 for _, e in kernel if e.event_type in CONNECT_IDS)
    datagrams = sum(1 for _, e in kernel if e.event_type in DATAGRAM_IDS)
    return connects, datagrams


def coverage_problems(health: ObservationHealth, kernel: list[tuple[int, Any]]) -> Iterator[Problem]:
    """Coverage is what the lines show (kernel/health.rs:8-25, kernel.rs:300-320).

    `unknown` is exempt: lines may be missing after a network hook dropped
    records. With `partial_ringbuf_drops` and no network lines the coverage
    must be `unknown` (kernel.rs:312-316): a lossy capture cannot claim none.
    """
    if health.kernel_layer == "absent" or health.network_protocol_coverage == "unknown":
        return
    connects, datagrams = _network_evidence(kernel)
    derived = {(False, False): "absent", (True, False): "connect_only",
               (False, True): "datagram_peer_observed",
               (True, True): "connect_and_datagram_peer_observed"}[(connects > 0, datagrams > 0)]
    if derived == "absent" and health.kernel_layer == "partial_ringbuf_drops":
        derived = "unknown"
    if health.network_protocol_coverage != derived:
        yield Problem(HEALTH, f"network_protocol_coverage {health.network_protocol_coverage!r} "
                      "does not match "
                      f"{KERNEL} ({connects} connect/connect_blocked, {datagrams} event_6/event_7 lines: "
                      f"expected {derived!r})")


def surface_problems(surface: CapabilitySurface, kernel: list[tuple[int, Any]]) -> Iterator[Problem]:
    """Filesystem, network and exec sets are exactly the kernel lines' values (kernel.rs:198-210)."""
    for set_name, ids in SURFACE_IDS.items():
        present = set(getattr(surface, set_name))
        seen: set[str] = set()
        for number, e in kernel:
            if e.event_type in ids and e.value is not None and e.value not in seen:
                seen.add(e.value)
                if e.value not in present:
                    yield Problem(SURFACE,
                                  f"{set_name} lacks {e.value!r} ({e.kind} at {KERNEL} line {number})")
        for extra in sorted(present - seen):
            yield Problem(SURFACE, f"{set_name} has {extra!r}, which no {KERNEL} line carries")
