"""Policy denials as kernel evidence: `connect_blocked` (20) and `file_blocked` (10).

Network: the cgroup sock_addr program writes a NET_BLOCK record when it
denies a connect or datagram send, then the syscall fails with EPERM. The
block record is the evidence; the failed attempt it stands for is dropped
so one denial is one line.

Files: Landlock denies with EACCES, which is also what ordinary permission
checks return. An EACCES open is a policy block only when the policy does
not allow that access to that path AND ordinary permissions would have
allowed it: the kernel checks DAC before Landlock, so a DAC denial happens
first and is not the policy's doing. For a root command DAC never denies; for
another user the runner records DAC verdicts for the candidates after the
run (`DacVerdicts` in the spool). Without a verdict the open stays a plain
failed `openat`: we never claim a block we cannot attribute.
"""

from __future__ import annotations

from ebpf.wire import HOOK_NET_BLOCK, NETWORK_HOOKS
from normalizer.paths import Resolved
from normalizer.tree import Thread

EPERM = 1


def merge_net_blocks(resolved: list[Resolved]) -> list[Resolved]:
    """Drop each failed connect/send that a preceding NET_BLOCK of its thread stands for."""
    awaiting: set[Thread] = set()
    out: list[Resolved] = []
    for r in resolved:
        e, thread = r.item.event, r.item.thread
        if e.hook == HOOK_NET_BLOCK:
            awaiting.add(thread)
        elif e.hook in NETWORK_HOOKS and thread in awaiting:
            awaiting.discard(thread)
            if e.ret == -EPERM:
                continue
        out.append(r)
    return out
