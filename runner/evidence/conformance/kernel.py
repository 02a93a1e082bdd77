"""Rules for `layers/kernel.ndjson`, each from Assay at base.UPSTREAM.

Per line: the published line schema (normalizer/upstream/kernel-event-v0.schema.json,
applied by upstream.kernel_schema_errors), the kind for each event_type, the
open metadata's derivations, and the loader telemetry upstream filters out.
Across members: network coverage and the capability surface versus the lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import groupby, islice, pairwise

import msgspec

from normalizer.artifacts import CapabilitySurface, KernelEvent, ObservationHealth
from normalizer.surface import DistinctValues
from normalizer.telemetry import assay_filters as is_loader_telemetry
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


class KernelFacts:
    """What the cross-member rules need of the kernel lines, gathered as the lines stream by.

    Counts, and each surface set's distinct values in `normalizer.surface.DistinctValues`
    (spilled as sorted runs past its bound), so a layer of millions of lines costs no more
    memory than one of thousands; the lines themselves are never held.
    """

    BOUND_EVERY = 1024
    """Values added between checks of the held values against their bound."""

    def __init__(self) -> None:
        self.count = self.connects = self.datagrams = self._added = 0
        self.values = DistinctValues(SURFACE_IDS)
        self._set_of = {i: self.values.sets[name] for name, ids in SURFACE_IDS.items() for i in ids}

    def add(self, event_type: int, value: str | None, lines: int = 1) -> None:
        """Count `lines` decoded lines alike in event_type and value (all that is needed of them)."""
        self.count += lines
        if event_type in CONNECT_IDS:
            self.connects += lines
        elif event_type in DATAGRAM_IDS:
            self.datagrams += lines
        held = self._set_of.get(event_type)
        if held is not None and value is not None:
            held.add(value)
            self._added += 1
            if self._added >= self.BOUND_EVERY:
                self._added = 0
                self.values.bound()

    def close(self) -> None:
        self.values.close()


def coverage_problems(health: ObservationHealth, kernel: KernelFacts) -> Iterator[Problem]:
    """Coverage is what the lines show (kernel/health.rs:8-25, kernel.rs:300-320).

    `unknown` is exempt: lines may be missing after a network hook dropped
    records. With `partial_ringbuf_drops` and no network lines the coverage
    must be `unknown` (kernel.rs:312-316): a lossy capture cannot claim none.
    """
    if health.kernel_layer == "absent" or health.network_protocol_coverage == "unknown":
        return
    connects, datagrams = kernel.connects, kernel.datagrams
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


MAX_LISTED = 20
"""Values a surface set lacks (or has in excess) listed one problem each; the rest are counted."""

Locate = Callable[[tuple[int, ...], set[str]], dict[str, tuple[int, str]]]
"""Finds the first kernel line of one of some event types carrying each of some values:
value -> (line number, kind)."""


def _sorted_distinct(values: Iterable[str]) -> Iterator[str]:
    """`values` in order, each once: as they come (repeats dropped) when already in order, else
    sorted through a spill (a surface that breaks the set rule is reported already, and still
    compared). `values` is iterated twice (a list, or a streamed document's list)."""
    if all(a <= b for a, b in pairwise(values)):
        return (v for v, _ in groupby(values))
    spill = DistinctValues(["values"])
    stream = iter(values)
    while batch := list(islice(stream, 1024)):
        spill.sets["values"].update(batch)
        spill.bound()
    return spill.sorted_values("values")


def _differences(present: Iterator[str], seen: Iterator[str]) -> tuple[list[str], list[str], int, int]:
    """Merge two sorted distinct streams: the first `MAX_LISTED` values only `seen` has (lacking from
    `present`) and only `present` has (extra), and how many of each there are."""
    lacking: list[str] = []
    extra: list[str] = []
    n_lacking = n_extra = 0
    p, s = next(present, None), next(seen, None)
    while p is not None or s is not None:
        if s is None or (p is not None and p < s):
            n_extra += 1
            if n_extra <= MAX_LISTED:
                extra.append(p)  # type: ignore[arg-type]  # p is not None here
            p = next(present, None)
        elif p is None or s < p:
            n_lacking += 1
            if n_lacking <= MAX_LISTED:
                lacking.append(s)
            s = next(seen, None)
        else:
            p, s = next(present, None), next(seen, None)
    return lacking, extra, n_lacking, n_extra


def surface_problems(surface: CapabilitySurface, kernel: KernelFacts, locate: Locate) -> Iterator[Problem]:
    """Filesystem, network and exec sets are exactly the kernel lines' values (kernel.rs:198-210).

    Both sides are merged in order (the surface's sets as stored, the lines' values from their
    spill), so neither is held; the first `MAX_LISTED` values lacking on each side are named,
    those the surface lacks with the first line that carries them, and the rest counted."""
    for set_name in SURFACE_IDS:
        lacking, extra, n_lacking, n_extra = _differences(_sorted_distinct(getattr(surface, set_name)),
                                                          kernel.values.sorted_values(set_name))
        where = locate(SURFACE_IDS[set_name], set(lacking)) if lacking else {}
        for value in sorted(lacking, key=lambda v: where.get(v, (0, ""))[0]):
            number, kind = where.get(value, (0, "?"))
            yield Problem(SURFACE, f"{set_name} lacks {value!r} ({kind} at {KERNEL} line {number})")
        if n_lacking > len(lacking):
            yield Problem(SURFACE, f"{set_name} lacks {n_lacking - len(lacking)} more of {KERNEL}'s values")
        for value in extra:
            yield Problem(SURFACE, f"{set_name} has {value!r}, which no {KERNEL} line carries")
        if n_extra > len(extra):
            yield Problem(SURFACE, f"{set_name} has {n_extra - len(extra)} more values no {KERNEL} line has")
