"""The run's command log: every exec with its argv, cwd and result, and how each process ended.

This is spool-only evidence (not a v0 member): the `blackbox` command log
is built from it. The kernel side (ebpf/monitor.c) writes:

- `EXEC_ARGV` at execve/execveat enter: up to 32 argv entries of up to 4095
  bytes each (8 KiB in all), read at enter because a successful exec replaces
  the memory they live in; cut or missing entries are flagged;
- `EXEC` (sched_process_exec) for a successful exec, `EXECVE` at exit for a
  failed one (with the path it asked for and -errno);
- `EXIT` at exit_group/exit enter with the status the process asked for,
  `SIGNAL` where a signal to a run task is generated, `PROC_EXIT` when a
  thread group's last thread exits (on kernels whose sched_process_exit has
  no `group_dead`, at every thread's exit: the last one in ring order is the
  group's, so the same thread is taken).

How a process ended: `exited` with the exit_group status (low 8 bits, as
wait(2) reports it), or the `exit` status of its last thread; otherwise
`signaled` with the last signal the kernel queued for it (a fatal signal is
turned into SIGKILL for each thread on delivery, so its number is only seen
where it is generated); `unknown` when neither was seen, and no exit at all
for a process still running when the capture ended.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from ebpf.wire import (
    HOOK_EXEC,
    HOOK_EXEC_ARGV,
    HOOK_EXECVE,
    HOOK_EXIT,
    HOOK_PROC_EXIT,
    HOOK_SIGNAL,
    TRUNC_ARGV,
    TRUNC_FIRST,
    TRUNC_UNREAD,
)
from normalizer.decode import RawEvent, iter_decode
from normalizer.paths import PathResolver
from normalizer.tree import Process, Thread, TreeBuilder, number_tree
from spool.format import Spool

SIGNAL_DELIVERED = 0  # signal_generate's result: queued for the target


class ExitStatus(msgspec.Struct, frozen=True):
    """How a process ended: `exited` (code 0-255), `signaled` (code = signal), or `unknown`."""

    how: str
    code: int | None


class ExecRecord(msgspec.Struct, frozen=True):
    """One exec attempt of the run, in canonical order.

    `process` is the kernel layer's `pid` (canonical tree position);
    `path` the resolved program path in the kernel layer's text (the exec
    line's value on success, the `event_101` line's on failure); `argv` the
    raw bytes of each entry; `argv_complete` is False when entries were cut,
    left out or unreadable. `result` is `success`, `error` (with `errno`) or
    `unknown` (the exec never returned, e.g. the task was killed in it).
    `exit` is the process's end, on the last successful exec of the process.
    """

    process: int
    thread_rank: int
    order: int
    path: str | None
    argv: list[bytes]
    argv_complete: bool
    cwd: str | None
    result: str
    errno: int | None = None
    exit: ExitStatus | None = None


class ExecLog(msgspec.Struct, frozen=True):
    """Every exec of the run, and the end of every process (keyed by canonical pid)."""

    execs: list[ExecRecord]
    exits: dict[int, ExitStatus]


@dataclass
class _Pending:
    thread: Thread
    order: int
    argv: list[bytes]
    argv_complete: bool
    cwd: str | None
    path: str | None = None
    result: str = "unknown"
    errno: int | None = None


@dataclass
class _Ends:
    group_status: dict[Process, int] = field(default_factory=dict)
    thread_status: dict[Thread, int] = field(default_factory=dict)
    last_signal: dict[Process, int] = field(default_factory=dict)
    ended: dict[Process, Thread] = field(default_factory=dict)

    def status(self, proc: Process) -> ExitStatus | None:
        last = self.ended.get(proc)
        if last is None:
            return None
        if proc in self.group_status:
            return ExitStatus("exited", self.group_status[proc] & 0xFF)
        if last in self.thread_status:
            return ExitStatus("exited", self.thread_status[last] & 0xFF)
        if proc in self.last_signal:
            return ExitStatus("signaled", self.last_signal[proc])
        return ExitStatus("unknown", None)


def argv_entries(data: bytes, count: int) -> list[bytes]:
    """The `count` NUL-terminated entries of an EXEC_ARGV payload."""
    return data.split(b"\0")[:count]


def exec_log(spool: Spool) -> ExecLog:
    """Walk the spool in ring order and collect every exec and every process end."""
    header = spool.header
    return exec_log_of(iter_decode(spool.records), header.control_pids, header.shim_pid, header.workdir)


def exec_log_of(events: Iterable[RawEvent], control_pids: list[int], shim_pid: int, workdir: str) -> ExecLog:
    """`exec_log` over decoded records in ring order."""
    tree = TreeBuilder(control_pids, shim_pid)
    resolver = PathResolver(workdir, tree.thread_of)
    pending: dict[int, _Pending] = {}  # host tid -> exec in flight
    done: list[_Pending] = []
    ends = _Ends()
    for order, item in enumerate(tree.attribute(events)):
        e, thread = item.event, item.thread
        proc = thread.process
        if e.hook == HOOK_EXEC_ARGV:
            complete = not e.truncated & (TRUNC_FIRST | TRUNC_ARGV | TRUNC_UNREAD)
            cwd = resolver.cwd(proc)
            pending[e.tid] = _Pending(thread, order, argv_entries(e.data, e.a0), complete, cwd)
        resolved = resolver.resolve(item)
        if e.hook == HOOK_EXEC:
            attempt = pending.pop(e.a0, None) or pending.pop(e.tid, None)
            if attempt is None:  # its argv record was lost: the exec still happened
                attempt = _Pending(thread, order, [], False, resolver.cwd(proc))
            attempt.path, attempt.result = resolved.path, "success"
            done.append(attempt)
        elif e.hook == HOOK_EXECVE:
            attempt = pending.pop(e.tid, None) or _Pending(thread, order, [], False, resolver.cwd(proc))
            attempt.path, attempt.result, attempt.errno = resolved.path, "error", -e.ret
            done.append(attempt)
        elif e.hook == HOOK_EXIT:
            if e.a1:
                ends.thread_status[thread] = e.a0
            else:
                ends.group_status.setdefault(proc, e.a0)
        elif e.hook == HOOK_SIGNAL and e.a2 == SIGNAL_DELIVERED:
            ends.last_signal[proc] = e.a0
        elif e.hook == HOOK_PROC_EXIT:
            ends.ended[proc] = thread
    done.extend(pending.values())  # execs that never returned
    processes = number_tree(tree.root)
    exits = {p.number: s for p in processes if (s := ends.status(p)) is not None}
    last_success: dict[Process, _Pending] = {}
    for attempt in done:
        if attempt.result == "success":
            last = last_success.get(attempt.thread.process)
            if last is None or attempt.order > last.order:
                last_success[attempt.thread.process] = attempt
    records = [
        ExecRecord(
            process=a.thread.process.number, thread_rank=a.thread.rank, order=a.order,
            path=a.path, argv=a.argv, argv_complete=a.argv_complete, cwd=a.cwd,
            result=a.result, errno=a.errno,
            exit=exits.get(a.thread.process.number) if last_success.get(a.thread.process) is a else None,
        )
        for a in done
    ]
    records.sort(key=lambda r: (r.process, r.thread_rank, r.order))
    return ExecLog(records, exits)
