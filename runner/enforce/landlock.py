"""Landlock file policy: a ruleset built in the runner, applied in the child.

The runner builds the ruleset before anything starts (so a policy the kernel
cannot enforce fails the run up front, with a clear line), and the command's
process applies it with `landlock_restrict_self` just before exec. The
handled rights are split in two groups: "read" (read files and directories,
execute) and "write" (write, truncate, create, remove, rename/link). A tree
in the policy's read list gets the read group, a tree in its write list gets
both. Device ioctls are not part of the policy and are left unhandled.

Fail closed: when the policy restricts writes, the kernel must be able to
restrict truncate(2) (Landlock ABI 3); when it restricts reads, ABI 1
suffices. A kernel without Landlock, or with too old an ABI, makes the run
fail instead of silently running unconfined.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass

from runner.errors import RunnerError
from runner.host.checks import LANDLOCK_WRITES_ABI

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
ABI_CAP_ENV = "ASSAY_RUNNER_LANDLOCK_ABI_MAX"
"""Pretend the kernel's Landlock ABI is at most this (reproduces older kernels in tests)."""

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_ALL = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3

READ_RIGHTS = EXECUTE | READ_FILE | READ_DIR
WRITE_RIGHTS_V1 = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_ALL

_libc = ctypes.CDLL(None, use_errno=True)


def kernel_abi() -> int:
    """The Landlock ABI version (0 when Landlock is unavailable), capped by the env override."""
    abi = _libc.syscall(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    abi = max(abi, 0)
    cap = os.environ.get(ABI_CAP_ENV)
    return min(abi, int(cap)) if cap else abi


def write_rights(abi: int) -> int:
    """The write group as far as `abi` can express it."""
    rights = WRITE_RIGHTS_V1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


@dataclass(frozen=True)
class FilePolicy:
    """Trees the command may read, and trees it may write (write implies read)."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    cgroups_only: bool = False
    """The policy writes everywhere; the write trees are `/` with the cgroup mounts cut out
    (runner/enforce/cgroupfs.py): any ABI's write rights keep a `cgroup.procs` write out."""

    @property
    def restricts_reads(self) -> bool:
        return "/" not in self.read and "/" not in self.write

    @property
    def restricts_writes(self) -> bool:
        return "/" not in self.write


def require_enforceable(policy: FilePolicy, abi: int) -> None:
    """Raise RunnerError when this kernel's Landlock cannot enforce `policy` (fail closed)."""
    if not (policy.restricts_reads or policy.restricts_writes):
        return
    if abi < 1:
        raise RunnerError(
            "the policy needs Landlock, which this kernel does not offer "
            "(enable CONFIG_SECURITY_LANDLOCK and lsm=landlock); refusing to run unconfined"
        )
    if policy.restricts_writes and abi < LANDLOCK_WRITES_ABI and not policy.cgroups_only:
        raise RunnerError(
            f"the policy restricts writes, but this kernel's Landlock ABI {abi} cannot restrict truncate(2) "
            f"(needs ABI {LANDLOCK_WRITES_ABI}, Linux 6.2); refusing to run with an unenforceable policy"
        )


class Ruleset:
    """A Landlock ruleset fd, ready for the child to apply."""

    def __init__(self, policy: FilePolicy, abi: int | None = None) -> None:
        abi = kernel_abi() if abi is None else abi
        self.abi = abi
        self.skipped: list[str] = []
        require_enforceable(policy, abi)
        write = write_rights(abi)
        handled = READ_RIGHTS | write
        attr = struct.pack("<Q", handled)
        fd = _libc.syscall(SYS_CREATE_RULESET, attr, len(attr), 0)
        if fd < 0:
            raise RunnerError(f"cannot create a Landlock ruleset: {os.strerror(ctypes.get_errno())}")
        self.fd = fd
        try:
            for path in policy.read:
                self._allow(path, READ_RIGHTS)
            for path in policy.write:
                self._allow(path, READ_RIGHTS | write)
        except BaseException:
            os.close(fd)
            raise

    def _allow(self, path: str, rights: int) -> None:
        try:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            self.skipped.append(path)  # nothing there to grant: stricter, never looser
            return
        try:
            if not os.path.isdir(path):
                rights &= ~(READ_DIR | REMOVE_DIR | REMOVE_FILE | MAKE_ALL | REFER)
            attr = struct.pack("<Qi", rights, target)
            if _libc.syscall(SYS_ADD_RULE, self.fd, RULE_PATH_BENEATH, attr, 0) != 0:
                err = ctypes.get_errno()
                raise RunnerError(f"cannot add a Landlock rule for {path}: {os.strerror(err)}")
        finally:
            os.close(target)

    def restrict_self(self) -> None:
        """Apply to the calling thread (the command's process, just before exec)."""
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if _libc.syscall(SYS_RESTRICT_SELF, self.fd, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
        os.close(self.fd)

    def close(self) -> None:
        """Release the runner's copy."""
        os.close(self.fd)
