"""BCC checked from inside `ebpf/`, for `doctor` and `run`'s prerequisites (runner/host/checks.py).

Nothing outside this package imports BCC, the host checks included: they ask
here whether BCC imports, and run the BPF probe below in a child process.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def bcc_found() -> str:
    """`bcc VERSION (DIRECTORY)` of the BCC this Python imports; whatever the import raises otherwise.

    BCC is Debian's python3-bpfcc: only a venv that sees the system site-packages can import it.
    """
    import bcc  # the import is the check

    return f"bcc {getattr(bcc, '__version__', '?')} ({Path(bcc.__file__).parent})"


# The BPF features the monitor's tracepoint programs rely on, in one small
# program: a syscall tracepoint, the current task's ids and the ring buffer. Not
# bpf_get_current_ancestor_cgroup_id: the network policy's cgroup programs
# use it (5.7), the monitor never does, and older kernels refuse it in a
# tracepoint program (Debian 11's 5.10 does, and runs the monitor).
_BPF_PROBE = r"""
BPF_RINGBUF_OUTPUT(rb, 1);
TRACEPOINT_PROBE(syscalls, sys_enter_getppid)
{
    if ((bpf_get_current_pid_tgid() >> 32) != TGID)
        return 0;
    u64 stamp = bpf_ktime_get_ns();
    rb.ringbuf_output(&stamp, sizeof(stamp), 0);
    return 0;
}
"""


def bpf_probe_main() -> None:
    """Compile, load, trigger and read the probe; print one JSON line.

    Runs in a child process (`check_bpf` in runner/host/checks.py) so a hang or a crash inside
    BCC/LLVM cannot take `doctor` down, and its compiler noise stays captured.
    """
    from bcc import BPF

    start = time.monotonic()
    bpf = BPF(text=_BPF_PROBE.replace("TGID", str(os.getpid())),
              cflags=["-Wno-macro-redefined", "-Wno-ignored-attributes"])
    records: list[int] = []

    def on_record(_ctx: int, _data: int, size: int) -> int:
        records.append(size)
        return 0

    bpf["rb"].open_ring_buffer(on_record)
    os.getppid()
    bpf.ring_buffer_poll(1000)
    bpf.cleanup()
    print(json.dumps({"records": len(records), "seconds": round(time.monotonic() - start, 2)}))
