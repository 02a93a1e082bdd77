"""Reaching into another process: ptrace attach and process_vm_readv/writev as `event_<id>` lines.

A tracer can read and write its tracee's memory and registers, and
process_vm_readv/writev copy another process's memory directly: either reads
secrets no open shows (an environment, a token in a heap) or changes a
program without touching a file. The monitor records the ptrace requests that
make a tracer (ATTACH, SEIZE, TRACEME: every other request needs one first)
and every process_vm call (ebpf/monitor.c). The lines (docs/artifacts.md):

| id | operation (successful) | `value` |
| --- | --- | --- |
| 80 | ptrace PTRACE_ATTACH or PTRACE_SEIZE | `pid:<n>`, the tracee |
| 80 | ptrace PTRACE_TRACEME | null (the tracer is the parent) |
| 81 | process_vm_readv | `pid:<n>`, the process read |
| 82 | process_vm_writev | `pid:<n>`, the process written |

A failed attempt is the same id plus 300 (380-382): plus 100, as file changes
use, would be 180-182, which are bind and memfd_create lines (normalizer/nsops.py).
`<n>` is the pid as the command passed it: a pid of the run's own pid
namespace (the runner starts the command in a fresh one, so every process
these calls can reach by pid is one of the run's), not a host pid and not
the archive's process number. Pids in a namespace follow the run's own
process creation, so a run that traces is byte-identical across runs only if
it creates its processes in the same order.
"""

from __future__ import annotations

from ebpf.wire import HOOK_PROCESS_VM, HOOK_PTRACE
from normalizer.classify import Classified, kind_name
from normalizer.paths import Resolved, to_int32

PTRACE, VM_READ, VM_WRITE = 80, 81, 82
FAILED = 300
"""Added to an id when the call failed."""
PTRACE_TRACEME = 0
TRACE_HOOKS = frozenset({HOOK_PTRACE, HOOK_PROCESS_VM})


def trace_event(r: Resolved, order: int) -> Classified:
    """The kernel line of one ptrace or process_vm record (TRACE_HOOKS)."""
    e = r.item.event
    if e.hook == HOOK_PTRACE:
        event_type, pid = PTRACE, None if e.a0 == PTRACE_TRACEME else to_int32(e.a1)
    else:
        event_type, pid = VM_WRITE if e.a1 else VM_READ, to_int32(e.a0)
    event_type += FAILED if e.ret < 0 else 0
    return Classified(event_type=event_type, kind=kind_name(event_type),
                      value=None if pid is None else f"pid:{pid}", meta=None, order=order, ts=e.ts)
