"""What each observation-health note means, in a reviewer's words.

Notes are `code: key=value ...` (docs/artifacts.md). The code says which
part of the capture the note is about; this table says what it tells a
reviewer and when to worry. A test keeps it complete: every note code the
normalizer can write must be here.
"""

from __future__ import annotations

MEANINGS = {
    "redaction": (
        "Secret-shaped strings (keys, tokens, credentials) in the run's values were replaced by "
        "<redacted:RULE:HASH> placeholders before the archive was hashed; redacted_count says how "
        "many. The raw spool is not redacted: show and report redact argv from it the same way."
    ),
    "s2_kernel_capture": (
        "How many kernel events the monitor kept and whether any were lost (ringbuf_drops), "
        "and which network evidence the run has: connect_only means TCP/UDP connects were seen "
        "but no datagram peers; endpoints are diagnostic, not a complete list of traffic."
    ),
    "s2_kernel_drops": (
        "Kernel records were lost, per hook: the kernel layer is partial and anything the "
        "run did may be missing from the evidence. Re-run; a busy machine or a flood of "
        "syscalls causes it."
    ),
    "s2_path_capture": (
        "Some path arguments were longer than the kernel accepts (4096 bytes or more): their "
        "values end in the truncation marker and those syscalls failed (ENAMETOOLONG)."
    ),
    "s2_path_source": (
        "Where the paths of opens come from. path_source=kernel: the kernel named each file it "
        "opened (security_file_open), so a symlink, a bind mount, a /proc/<pid>/root alias or a "
        "racing thread rewriting the path cannot make a line name another file; "
        "kernel_named_opens counts the opens so named, and io_uring opens are event_85 lines. "
        "path_source=user_memory: this kernel offers no such hook (no fentry), and paths are the "
        "strings the program passed, read from its memory at the syscall's exit."
    ),
    "s2_path_resolution": (
        "Some paths could not be made absolute (their working directory or directory fd "
        "was never seen); those files appear as the relative path the program passed. "
        "unresolved_fd_reopens and unresolved_proc_aliases count opens through /proc/<pid>/fd/N, "
        "/dev/fd/N, /proc/<pid>/root or /proc/<pid>/cwd whose target is unknown (an fd of unknown "
        "origin, a process outside the run): those lines keep the path as written."
    ),
    "s2_run_ended": (
        "The run did not end by the command exiting: it was ended from outside (reason: a signal "
        "to the runner such as sigint, sigterm or sighup, the daemon client disconnected, or the "
        "daemon shut down) while the command ran (phase=command), and the whole process tree was "
        "killed. What the command would have done afterwards is not in the archive."
    ),
    "s2_run_recovered": (
        "The run could not finish its spool (cause=runner_died: the runner was killed or crashed; "
        "incomplete_spool: its disk was full, say) and this archive was rebuilt from what had been "
        "flushed: the records of its last moments, the command's exit status and the kernel's drop "
        "counters are missing, so correlation is partial. Re-run for a complete capture."
    ),
    "s2_unread_user_memory": (
        "The monitor could not read some of the command's memory at a syscall (a path, an argv "
        "entry, openat2's open_how, sendmsg's header), per hook: those lines carry what could be "
        "read (a null value, an unknown access mode, a datagram without its peer). Pages not yet "
        "faulted in cause it; many of them is a program hiding its arguments."
    ),
    "s3_path_namespace": (
        "A process of the run changed its mount namespace or root (unshare, clone or setns with a "
        "mount namespace, chroot, pivot_root; processes= counts them and what they started), or "
        "the mount table changed (mount_changes=): after that a path in the archive may name a "
        "different file than the same path on the host (a bind mount over a directory, say). The "
        "event_160-172 lines say what was done; correlation is partial."
    ),
    "s2_kernel_hooks": (
        "This kernel lacks some of the monitor's tracepoints. absent_by_kernel: the syscall does "
        "not exist on this kernel (e.g. fchmodat2 before Linux 6.6), so nothing went through it and "
        "nothing is missing. lost: the syscall exists but could not be traced (complete=false): "
        "what the command did through it is not in the kernel layer."
    ),
    "s2_untraced_io": (
        "The command used io_uring or open_by_handle_at: operations done that way are not in "
        "the kernel layer, so files and endpoints may be missing (network coverage becomes "
        "unknown with io_uring) and correlation is partial: such a run is never passing. A "
        "confining policy refuses io_uring outright."
    ),
    "s2_compat_syscalls": (
        "The run was allowed compat-ABI syscalls (--allow-compat-syscalls: int $0x80, x32), which "
        "the kernel's per-syscall tracepoints never see: whatever the command did that way is not "
        "in the kernel layer, so correlation is partial."
    ),
    "s3_syscalls_refused": (
        "The run's seccomp filter refused syscalls (counts by class): compat-ABI calls always, "
        "io_uring and new user namespaces under a policy that restricts writes or the network. "
        "The command got an error instead; nothing happened unseen. Many refusals are a sign of "
        "a command trying to get around the tracepoints or the sandbox."
    ),
    "s3_resource_limits": (
        "A resource limit of the run's cgroup refused the command (pids_refused: forks that failed "
        "with EAGAIN at pids_max; oom_kills: tasks the OOM killer ended at memory_max), or a default "
        "limit could not be set because the host lacks the controller (unavailable=...). The "
        "evidence is complete; the command's behaviour was shaped by the limit."
    ),
    "s3_cgroup_escape": (
        "A process of the run moved itself out of the run's cgroup (or was cloned into another "
        "one): it was still followed by lineage, but the cgroup's network policy and cleanup no "
        "longer applied to it. Treat as a hostile sign."
    ),
    "s3_lineage": (
        "The map that follows the run's process lineage was full: some tasks were not tracked, "
        "so their events may be missing (correlation is partial)."
    ),
    "s3_cgroup_correlation": (
        "Events in the run's cgroup could not be tied to the command's process tree "
        "(root_seen=false: the command itself was never seen starting). Evidence may be "
        "attributed to the wrong process or missing."
    ),
    "s4_command_privilege": (
        "The command ran as root with no policy restricting its writes: it could have changed "
        "anything on the machine, --out included. Run it as a user (--user, or sudo's default) "
        "or under a write-restricting policy for evidence it cannot touch."
    ),
    "s4_policy_capture": (
        "The run has policy lines: decision_events is how many tool-call decisions the policy "
        "layer holds (one per tool call). What the kernel refused is in the file_blocked and "
        "connect_blocked kernel lines (the blocks below)."
    ),
    "s5_sdk_capture": (
        "The agent reported tool calls over the SDK channel: these are self-reported by the "
        "agent, bound to kernel events by the runner's own receipt times."
    ),
    "transient_names": (
        "Random temporary names the run created and removed again were replaced by canonical "
        "placeholders, so three runs stay byte-identical; substituted says how many distinct paths "
        "(docs/determinism.md)."
    ),
}
UNKNOWN = "No description in this version of assay-runner; see docs/artifacts.md."


def meaning(note: str) -> str:
    """The reviewer's explanation of one note (by its code)."""
    return MEANINGS.get(note.split(":", 1)[0], UNKNOWN)
