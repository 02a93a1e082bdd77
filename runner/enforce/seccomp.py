"""The command's seccomp filter: calls the tracepoints cannot see, and ways out of a sandbox, refused.

The filter is classic BPF over `struct seccomp_data`, assembled here
(`program`), so it can be read and tested without loading it. The
command's process installs it right before exec (runner/capture/spawn.py),
while still root, so it needs no `no_new_privs` of its own (`install`), and
it binds the command and every process it starts, never the runner. What it refuses:

- always (unless `--allow-compat-syscalls`): every syscall of a non-native
  ABI, x86's `int $0x80` (i386) and x32 (`nr | __X32_SYSCALL_BIT`) on
  x86-64, 32-bit ARM on arm64. The per-syscall tracepoints never fire for
  those (the kernel leaves compat calls out of them), so an allowed compat
  call would write files unseen. They fail with ENOSYS, as on a kernel
  built without compat support.
- under a policy that restricts writes or the network (`confine`):
  `io_uring_setup`/`_enter`/`_register` (EPERM: io_uring's operations pass
  no traced syscall, as Docker's default profile does since 2023);
  `unshare` and `clone` with CLONE_NEWUSER (EPERM: an unprivileged user
  namespace gives the command root's powers over paths it then aliases);
  `clone3` (ENOSYS: its flags live in memory seccomp cannot read, so
  CLONE_NEWUSER and CLONE_INTO_CGROUP could not be told apart; glibc falls
  back to `clone`, whose flags it can).

Refusals go through SECCOMP_RET_USER_NOTIF to a supervisor in the runner
(runner/enforce/seccomp_notify.py), which answers each with its errno and
counts it, so the count in the archive is the kernel's own; `clone3` alone
is refused by the filter itself (glibc calls it on every thread and
process it starts: that fallback is routine, not evidence). Should the
supervisor be gone, the kernel answers ENOSYS: the call is refused all the
same.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass

from runner.errors import RunnerError

# classic BPF (linux/filter.h, linux/bpf_common.h)
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
JSET_K = 0x45
ALU_AND_K = 0x54
RET_K = 0x06

# seccomp (linux/seccomp.h)
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_USER_NOTIF = 0x7FC00000
SET_MODE_FILTER = 1
FILTER_FLAG_NEW_LISTENER = 1 << 3
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16
"""Offsets in `struct seccomp_data`; an argument's low 32 bits are at its offset (little-endian)."""

PR_SET_NO_NEW_PRIVS = 38
X32_SYSCALL_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
MAX_INSNS = 4096


@dataclass(frozen=True)
class Abi:
    """One syscall ABI: its audit arch and the numbers the confine rules test."""

    name: str
    arch: int
    clone: int
    unshare: int
    clone3: int = 435
    io_uring: tuple[int, ...] = (425, 426, 427)


@dataclass(frozen=True)
class Machine:
    """The native ABI of a machine, the other ABIs its kernel accepts, and seccomp(2)'s number."""

    native: Abi
    compat: tuple[Abi, ...]
    seccomp_nr: int
    x32: bool = False


MACHINES = {
    "x86_64": Machine(Abi("x86_64", 0xC000003E, clone=56, unshare=272),
                      (Abi("i386", 0x40000003, clone=120, unshare=310),), seccomp_nr=317, x32=True),
    "aarch64": Machine(Abi("aarch64", 0xC00000B7, clone=220, unshare=97),
                       (Abi("arm", 0x40000028, clone=120, unshare=337),), seccomp_nr=277),
}


def machine(name: str | None = None) -> Machine:
    """This machine's (or `name`'s) ABIs; a machine without a table cannot run a filtered command."""
    name = name or platform.machine()
    try:
        return MACHINES[name]
    except KeyError:
        raise RunnerError(f"no seccomp syscall table for the {name} machine: the command's compat "
                          "syscalls could not be refused") from None


@dataclass(frozen=True)
class Rules:
    """What the filter refuses (the module docstring says why)."""

    refuse_compat: bool = True
    confine: bool = False

    @property
    def needed(self) -> bool:
        return self.refuse_compat or self.confine


def errno_of(ret: int) -> int:
    """Which errno a SECCOMP_RET_ERRNO verdict returns."""
    return ret & 0xFFFF


class _Asm:
    """Instructions with symbolic jump targets, resolved to cBPF's forward offsets."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        """A conditional jump; an int target is "the next instruction" (0), a str a label."""
        self.code.append((op, jt, jf, k))

    def op(self, code: int, k: int) -> None:
        self.code.append((code, 0, 0, k))

    def assemble(self) -> bytes:
        out = []
        for i, (code, jt, jf, k) in enumerate(self.code):
            offsets = [self.labels[t] - i - 1 if isinstance(t, str) else t for t in (jt, jf)]
            if any(not 0 <= o < 256 for o in offsets):
                raise ValueError(f"jump out of range at instruction {i}")
            out.append(struct.pack("<HBBI", code, offsets[0], offsets[1], k))
        if len(out) > MAX_INSNS:
            raise ValueError("filter too long")
        return b"".join(out)


def _confine(asm: _Asm, abi: Abi, prefix: str) -> None:
    """With the syscall number loaded: refuse `abi`'s io_uring, user namespaces and clone3."""
    asm.jump(JEQ_K, abi.clone3, f"{prefix}clone3")
    for nr in abi.io_uring:
        asm.jump(JEQ_K, nr, "notify")
    asm.jump(JEQ_K, abi.unshare, f"{prefix}flags")
    asm.jump(JEQ_K, abi.clone, f"{prefix}flags")
    asm.op(RET_K, RET_ALLOW)
    asm.label(f"{prefix}flags")
    asm.load(OFF_ARG0)
    asm.jump(JSET_K, CLONE_NEWUSER, "notify")
    asm.op(RET_K, RET_ALLOW)
    asm.label(f"{prefix}clone3")
    asm.op(RET_K, RET_ERRNO | errno.ENOSYS)


def program(rules: Rules, mach: Machine) -> bytes:
    """The filter for `rules` on `mach`, as `struct sock_filter` words."""
    asm = _Asm()
    asm.load(OFF_ARCH)
    asm.jump(JEQ_K, mach.native.arch, 0, "foreign")
    asm.load(OFF_NR)
    if mach.x32:
        asm.jump(JGE_K, X32_SYSCALL_BIT, 0, "native")
        if rules.refuse_compat:  # above the x32 range: no syscall, the kernel answers ENOSYS itself
            asm.jump(JGE_K, 0x80000000, "allow", "notify")
        else:
            asm.op(ALU_AND_K, ~X32_SYSCALL_BIT & 0xFFFFFFFF)  # x32 numbers are the native ones
    asm.label("native")
    if rules.confine:
        _confine(asm, mach.native, "native_")
    else:
        asm.op(RET_K, RET_ALLOW)
    asm.label("foreign")
    if rules.refuse_compat or not rules.confine:
        asm.op(RET_K, RET_USER_NOTIF if rules.refuse_compat else RET_ALLOW)
    else:
        for abi in mach.compat:
            asm.jump(JEQ_K, abi.arch, 0, f"not_{abi.name}")
            asm.load(OFF_NR)
            _confine(asm, abi, f"{abi.name}_")
            asm.label(f"not_{abi.name}")
        asm.op(RET_K, RET_USER_NOTIF)  # an ABI without a table: refused rather than unchecked
    asm.label("allow")
    asm.op(RET_K, RET_ALLOW)
    asm.label("notify")
    asm.op(RET_K, RET_USER_NOTIF)
    return asm.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def install(prog: bytes, mach: Machine) -> int:
    """Apply `prog` to the calling thread (and what it starts); returns the notification fd.

    Without CAP_SYS_ADMIN (a runner given only CAP_BPF and friends) the
    kernel wants no_new_privs first: it is set then, and only then, so
    setuid programs in the command keep working wherever they can.
    """
    fprog = _SockFprog(len(prog) // 8, prog)
    for attempt in range(2):
        fd = _libc.syscall(mach.seccomp_nr, SET_MODE_FILTER, FILTER_FLAG_NEW_LISTENER, ctypes.byref(fprog))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EACCES or attempt or _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            break
    raise OSError(err, f"seccomp(SECCOMP_SET_MODE_FILTER): {os.strerror(err)}")
