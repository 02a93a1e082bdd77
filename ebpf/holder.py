"""Keep a forked process holding the monitor's kernel objects and nothing else.

A process forked only to hold the last references to the monitor's programs,
maps, links and tracepoint attachments (so that another process's closes
return at once: releasing an attachment waits for an RCU grace period) must
not keep anything else its parent had open: the caller's pipes and terminal,
`--out`, a spool. Such a descriptor would keep a directory busy (an `--out`
on a tmpfs could not be unmounted) or a pipe open long after the run.
"""

from __future__ import annotations

import contextlib
import os

KERNEL_OBJECTS = ("anon_inode:bpf", "anon_inode:[perf_event]")
"""What the monitor's programs, maps, links and tracepoint attachments look like in /proc/PID/fd."""


def keep_only_kernel_objects(keep: tuple[int, ...] = ()) -> None:
    """Close every descriptor of this process but `keep` and the BPF/perf ones; stdio to /dev/null."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd in keep:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed already
        if not target.startswith(KERNEL_OBJECTS):
            with contextlib.suppress(OSError):
                os.close(fd)
