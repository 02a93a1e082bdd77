"""Observation health: what the capture can and cannot claim.

Rules (contract "observation-health.json", decisions in docs/artifacts.md):
- `kernel_layer` is `complete` with zero drops, else `partial_ringbuf_drops`.
  Drops are the kernel's failed ring-buffer writes plus any record the kernel
  emitted that never reached the spool. A spool recovered after the runner
  died counts one more: how many records were lost after its last flush is
  unknown, but at least the end of the command's tree (its exit records) was
  never drained, so such a run is never `complete`.
- `cgroup_correlation` is `clean` when every event of the run's tasks was
  attributed to the command's process tree, `partial` when some were not (or
  a process-creation record was dropped), when a task left the run's cgroup
  (migration or clone3 CLONE_INTO_CGROUP: still observed and held to the
  network policy by lineage, but out of the cgroup's kill and limits), or
  when the lineage map was full and a task went untracked, or when the spool
  was recovered after the runner died (the end of the tree was never seen),
  or when the command could make compat syscalls (`--allow-compat-syscalls`:
  calls no syscall tracepoint sees, so events may be missing, and the
  contract's `kernel_layer` has no value for that); `failed` when the
  command's root process was never seen.
- network coverage comes from the normalized network evidence; drops on a
  network hook make it `unknown`, since peers may be missing, and so does an
  io_uring instance (its connects and sends are not traced).
- a process of the run that changed its mount namespace or root, or any
  change of the mount table, makes `cgroup_correlation` partial with an
  `s3_path_namespace` note: the paths the run reports afterwards may not be
  host paths, and tracepoint arguments cannot map them back.
- records whose user memory could not be read (a path, argv, openat2's
  `how`, sendmsg's msghdr) are counted per hook in `s2_unread_user_memory`.
- io_uring_setup and open_by_handle_at get an `s2_untraced_io` note with
  their counts and make `cgroup_correlation` partial: what goes through them
  is not in the kernel layer, whatever `kernel_layer` says about ring-buffer
  loss (the contract's `kernel_layer` has no value for untraced operations),
  so such a run is never PASSING. Under a confining policy io_uring is
  refused before it exists (runner/enforce/seccomp.py).
- hooks the kernel lacked get an `s2_kernel_hooks` note: `absent_by_kernel`
  (no such syscall there: nothing is missing) and `lost` (the syscall exists
  but was not seen: `complete=false`, `cgroup_correlation` partial, and a
  lost network syscall makes the network coverage `unknown`). The contract's
  `kernel_layer` has no value for a hook that was never attached, so the note
  is where this is said.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from ebpf.wire import HOOK_NAMES, HOOK_NET_BLOCK, NETWORK_HOOKS
from normalizer.artifacts import (
    HEALTH_SCHEMA,
    Correlation,
    EndpointClaimScope,
    NetworkCoverage,
    ObservationHealth,
    PolicyLayer,
    SdkLayer,
)
from policy.model import ResolvedPolicy

CONNECT_KINDS = frozenset({"connect", "connect_blocked"})
DATAGRAM_KINDS = frozenset({"event_6", "event_7"})
NETWORK_HOOK_NAMES = frozenset(HOOK_NAMES[h] for h in (*NETWORK_HOOKS, HOOK_NET_BLOCK))
NETWORK_SYSCALLS = frozenset({"connect", "sendto", "sendmsg"})
"""Syscalls whose hooks the network evidence comes from: one lost makes the coverage unknown."""


@dataclass(frozen=True)
class CaptureFacts:
    """Counters from the capture that health is derived from."""

    drops: dict[str, int]
    emitted: dict[str, int]
    captured: int
    unattributed_events: int
    root_seen: bool
    unresolved_paths: int
    platform: str = "linux"
    unresolved_reopens: int = 0
    unresolved_aliases: int = 0
    """/proc/<pid>/root and cwd links that could not be followed (their lines keep the path as written)."""
    cgroup_escapes: int = 0
    clone_into_cgroup: int = 0
    untracked_tasks: int = 0
    untraced_io: dict[str, int] = field(default_factory=dict)
    """Calls that open I/O the monitor cannot follow (io_uring_setup, open_by_handle_at)."""
    truncated_paths: int = 0
    """Path payloads cut at the kernel's capture limit (their values end in the marker)."""
    recovered: bool = False
    """The spool was closed by a recovery after the runner died: its end is missing."""
    compat_syscalls_allowed: bool = False
    """The command could make non-native ABI syscalls, which no tracepoint sees."""
    unread: dict[str, int] = field(default_factory=dict)
    """Records per hook whose user memory (a path, argv, an argument struct) could not be read."""
    moved_processes: int = 0
    """Processes that changed their mount namespace or root: their paths are not host paths."""
    mount_changes: int = 0
    """Successful mount, umount2 and move_mount calls: any path may be an alias afterwards."""
    hooks_missing: dict[str, str] = field(default_factory=dict)
    """Hooks the kernel lacked: name -> `absent_by_kernel` or `lost` (ebpf/probing.py)."""
    path_source: str = "user_memory"
    """Where open paths came from: `kernel` (security_file_open) or `user_memory` (ebpf/kpaths.py)."""
    kernel_paths: int = 0
    """Opens whose line names the kernel's path of the file (normalizer/kernelpaths.py)."""
    requested: dict[str, str] = field(default_factory=dict)
    """Kernel path -> the first requested string that named it differently (for `show --spool`)."""

    @property
    def lost_hooks(self) -> list[str]:
        return sorted(k for k, v in self.hooks_missing.items() if v == "lost")

    @property
    def lost_in_transit(self) -> int:
        """Records the kernel emitted that the spool does not hold."""
        return max(sum(self.emitted.values()) - self.captured, 0)

    @property
    def lost_after_death(self) -> int:
        """The least number of records a recovered run lost after its last flush (the count is unknown)."""
        return 1 if self.recovered else 0

    @property
    def total_drops(self) -> int:
        return sum(self.drops.values()) + self.lost_in_transit + self.lost_after_death


def network_coverage(kinds: Set[str], facts: CaptureFacts) -> tuple[NetworkCoverage, EndpointClaimScope]:
    """(network_protocol_coverage, network_endpoint_claim_scope) from the kinds in the kernel layer."""
    if any(facts.drops.get(name, 0) for name in NETWORK_HOOK_NAMES) or facts.lost_in_transit \
            or facts.untraced_io.get("io_uring_setup") or set(facts.lost_hooks) & NETWORK_SYSCALLS:
        return "unknown", "unknown"
    connect = bool(kinds & CONNECT_KINDS)
    datagram = bool(kinds & DATAGRAM_KINDS)
    if connect and datagram:
        return "connect_and_datagram_peer_observed", "diagnostic_only"
    if connect:
        return "connect_only", "diagnostic_only"
    if datagram:
        return "datagram_peer_observed", "diagnostic_only"
    if facts.total_drops:  # a lossy capture cannot claim no network (kernel.rs:312-316)
        return "unknown", "unknown"
    return "absent", "not_applicable"


def cgroup_correlation(facts: CaptureFacts) -> Correlation:
    """clean, partial or failed, as the module docstring says."""
    if not facts.root_seen:
        return "failed"
    if facts.unattributed_events or facts.drops.get("newtask", 0) or facts.untracked_tasks \
            or facts.cgroup_escapes or facts.clone_into_cgroup or facts.recovered \
            or facts.compat_syscalls_allowed or facts.moved_processes or facts.mount_changes \
            or facts.untraced_io or facts.lost_hooks:
        return "partial"
    return "clean"


def privilege_note(uid: int, policy: ResolvedPolicy | None) -> str | None:
    """The note for a command that ran as root with no policy restricting its writes.

    Such a command could change any file, the run's `--out` and the runner
    included, so the evidence is only as trustworthy as the command: the
    archive says so (docs/architecture.md, "Protecting the evidence").
    """
    if uid != 0 or (policy is not None and "/" not in policy.filesystem.write):
        return None
    return "s4_command_privilege: uid=0 unrestricted_writes=true"


def observation_health(
    run_id: str,
    kinds: Set[str],
    events: int,
    facts: CaptureFacts,
    extra_notes: list[str],
    policy_layer: PolicyLayer = "absent",
    sdk_layer: SdkLayer = "absent",
) -> ObservationHealth:
    """The health artifact for a normalized run."""
    drops = facts.total_drops
    coverage, scope = network_coverage(kinds, facts)
    notes = [
        f"s2_kernel_capture: monitor_events={events} ringbuf_drops={drops} "
        f"network_protocol_coverage={coverage} network_endpoint_claim_scope={scope}"
    ]
    if drops:
        parts = [f"{k}={v}" for k, v in sorted(facts.drops.items()) if v]
        if facts.lost_in_transit:
            parts.append(f"lost_in_transit={facts.lost_in_transit}")
        if facts.lost_after_death:
            parts.append("after_runner_death=at_least_1")
        notes.append("s2_kernel_drops: " + " ".join(parts))
    if facts.unresolved_paths or facts.unresolved_reopens or facts.unresolved_aliases:
        notes.append(f"s2_path_resolution: unresolved_paths={facts.unresolved_paths} "
                     f"unresolved_fd_reopens={facts.unresolved_reopens}"
                     + (f" unresolved_proc_aliases={facts.unresolved_aliases}"
                        if facts.unresolved_aliases else ""))
    if facts.untraced_io:
        notes.append("s2_untraced_io: " + " ".join(f"{k}={v}" for k, v in sorted(facts.untraced_io.items()))
                     + " operations_not_in_kernel_layer=true")
    if facts.cgroup_escapes or facts.clone_into_cgroup:
        notes.append(f"s3_cgroup_escape: migrations={facts.cgroup_escapes} "
                     f"clone_into_cgroup={facts.clone_into_cgroup} followed_by_lineage=true")
    if facts.untracked_tasks:
        notes.append(f"s3_lineage: untracked_tasks={facts.untracked_tasks} tracking_map_full=true")
    if facts.unread:
        unread = " ".join(f"{k}={v}" for k, v in sorted(facts.unread.items()))
        notes.append(f"s2_unread_user_memory: {unread}")
    if facts.moved_processes or facts.mount_changes:
        notes.append(f"s3_path_namespace: processes={facts.moved_processes} "
                     f"mount_changes={facts.mount_changes} host_paths=unmapped")
    if facts.truncated_paths:
        notes.append(f"s2_path_capture: truncated_paths={facts.truncated_paths}")
    notes.append(f"s2_path_source: path_source={facts.path_source}"
                 + (f" kernel_named_opens={facts.kernel_paths}" if facts.path_source == "kernel" else ""))
    if facts.hooks_missing:
        absent = sorted(k for k, v in facts.hooks_missing.items() if v == "absent_by_kernel")
        lost = facts.lost_hooks
        notes.append(f"s2_kernel_hooks: absent_by_kernel={','.join(absent) or 'none'} "
                     f"lost={','.join(lost) or 'none'} complete={str(not lost).lower()}")
    correlation = cgroup_correlation(facts)
    if correlation != "clean":
        notes.append(
            f"s3_cgroup_correlation: root_seen={str(facts.root_seen).lower()} "
            f"unattributed_events={facts.unattributed_events} "
            f"newtask_drops={facts.drops.get('newtask', 0)}"
        )
    linux = facts.platform == "linux"
    return ObservationHealth(
        schema=HEALTH_SCHEMA,
        run_id=run_id,
        platform=facts.platform,
        kernel_layer=("complete" if not drops else "partial_ringbuf_drops") if linux else "absent",
        ringbuf_drops=drops,
        policy_layer=policy_layer,
        sdk_layer=sdk_layer,
        cgroup_correlation=correlation,
        network_protocol_coverage=coverage,
        network_endpoint_claim_scope=scope,
        notes=sorted(notes + extra_notes),
    )
