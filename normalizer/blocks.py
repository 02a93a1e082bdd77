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

from collections.abc import Iterable, Iterator

from ebpf.wire import HOOK_NET_BLOCK, HOOK_OPEN, NETWORK_HOOKS
from normalizer.paths import Resolved
from normalizer.text import os_path
from normalizer.tree import Thread
from policy.model import ResolvedPolicy

EPERM = 1


def merge_net_blocks(resolved: Iterable[Resolved]) -> Iterator[Resolved]:
    """Drop each failed connect/send that a preceding NET_BLOCK of its thread stands for."""
    merge = NetBlockMerge()
    return (r for r in resolved if merge.keep(r))


class NetBlockMerge:
    """`merge_net_blocks` one event at a time, in ring order."""

    def __init__(self) -> None:
        self._awaiting: set[Thread] = set()

    def keep(self, r: Resolved) -> bool:
        """False for a failed connect/send that its thread's preceding NET_BLOCK stands for."""
        e = r.item.event
        if e.hook == HOOK_NET_BLOCK:
            self._awaiting.add(r.item.thread)
        elif e.hook in NETWORK_HOOKS and r.item.thread in self._awaiting:
            self._awaiting.discard(r.item.thread)
            if e.ret == -EPERM:
                return False
        return True


EACCES = 13


def dac_key(access: str, path: str) -> str:
    """The DacVerdicts key for one access."""
    return f"{access}:{path}"


class FileBlockJudge:
    """Decides which failed opens were the policy's doing (see the module docstring)."""

    def __init__(self, policy: ResolvedPolicy | None, uid: int, dac: dict[str, bool]) -> None:
        self._policy = policy
        self._root = uid == 0
        self._dac = dac
        self.unattributed: list[tuple[str, str]] = []
        """(access, path) of policy-refused EACCES opens with no DAC verdict yet."""

    def questions(self) -> list[tuple[str, str]]:
        """The (access, path) pairs the runner must check as the command's user (sorted, unique)."""
        return sorted(set(self.unattributed))

    def may_judge(self, ret: int) -> bool:
        """Could an open that returned `ret` be judged a block (or asked about)? Only a
        failure with EACCES under a policy; every other open's evidence is its shape alone."""
        return self._policy is not None and ret == -EACCES

    def denied_access(self, r: Resolved) -> str | None:
        """The access a policy-refused EACCES open asked for, or None."""
        e = r.item.event
        if self._policy is None or e.hook != HOOK_OPEN or e.ret != -EACCES or r.path is None:
            return None
        return self._policy.open_denial(os_path(r.path), e.a1)

    def blocked_access(self, r: Resolved) -> str | None:
        """The refused access when this open was a policy block, else None."""
        access = self.denied_access(r)
        if access is None or r.path is None or self._root:
            return access
        verdict = self._dac.get(dac_key(access, r.path))
        if verdict is None:
            self.unattributed.append((access, r.path))
        return access if verdict else None
