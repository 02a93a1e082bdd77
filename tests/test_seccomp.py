"""The command's seccomp filter, as a program: run through a cBPF interpreter, then loaded in a child.

The interpreter below is written from the kernel's cBPF semantics, not from
runner/enforce/seccomp.py, so it checks what the assembled words mean. The
kernel tests load the same program in a forked child with its supervisor
(runner/enforce/seccomp_notify.py) and make the calls for real.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
from collections.abc import Callable

import pytest

from runner.enforce.seccomp import MACHINES, Rules, program
from runner.enforce.seccomp_notify import Guard, classify

X86 = MACHINES["x86_64"]
ARM64 = MACHINES["aarch64"]
X86_64, AUDIT_I386, AUDIT_AARCH64, AUDIT_ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
X32 = 0x40000000
NEWUSER, NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17
ALLOW, NOTIFY = 0x7FFF0000, 0x7FC00000
ENOSYS = 0x00050000 | errno.ENOSYS


def run_filter(prog: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """What the kernel's cBPF machine returns for `struct seccomp_data` (nr, arch, ip 0, args)."""
    data = struct.pack("<iIQ6Q", nr if nr < 1 << 31 else nr - (1 << 32), arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack_from("<HBBI", prog, i) for i in range(0, len(prog), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            (acc,) = struct.unpack_from("<I", data, k)
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc &= k
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf


STRICT = Rules(refuse_compat=True, confine=True)
DEFAULT = Rules(refuse_compat=True, confine=False)
C_CONF = Rules(refuse_compat=False, confine=True)
OPEN = Rules(refuse_compat=False, confine=False)

CASES = [
    # (what, nr, arch, arg0, {rules: verdict})
    ("native getpid", 39, X86_64, 0, {STRICT: ALLOW, DEFAULT: ALLOW, C_CONF: ALLOW, OPEN: ALLOW}),
    ("native clone, plain fork", 56, X86_64, SIGCHLD, {STRICT: ALLOW, DEFAULT: ALLOW, C_CONF: ALLOW}),
    ("native clone, new user ns", 56, X86_64, NEWUSER | SIGCHLD,
     {STRICT: NOTIFY, DEFAULT: ALLOW, C_CONF: NOTIFY, OPEN: ALLOW}),
    ("native unshare, new user ns", 272, X86_64, NEWUSER, {STRICT: NOTIFY, DEFAULT: ALLOW}),
    ("native unshare, new mount ns", 272, X86_64, NEWNS, {STRICT: ALLOW, DEFAULT: ALLOW}),
    ("native clone3", 435, X86_64, 0, {STRICT: ENOSYS, DEFAULT: ALLOW, C_CONF: ENOSYS}),
    ("native io_uring_setup", 425, X86_64, 8, {STRICT: NOTIFY, DEFAULT: ALLOW, OPEN: ALLOW}),
    ("native io_uring_enter", 426, X86_64, 3, {STRICT: NOTIFY, DEFAULT: ALLOW}),
    ("native io_uring_register", 427, X86_64, 3, {STRICT: NOTIFY, DEFAULT: ALLOW}),
    ("i386 open", 5, AUDIT_I386, 0, {STRICT: NOTIFY, DEFAULT: NOTIFY, C_CONF: ALLOW, OPEN: ALLOW}),
    ("i386 clone3", 435, AUDIT_I386, 0, {STRICT: NOTIFY, C_CONF: ENOSYS, OPEN: ALLOW}),
    ("i386 unshare, new user ns", 310, AUDIT_I386, NEWUSER, {C_CONF: NOTIFY, OPEN: ALLOW}),
    ("i386 clone, new user ns", 120, AUDIT_I386, NEWUSER, {C_CONF: NOTIFY}),
    ("i386 io_uring_setup", 425, AUDIT_I386, 8, {C_CONF: NOTIFY}),
    ("x32 open", X32 | 2, X86_64, 0, {STRICT: NOTIFY, DEFAULT: NOTIFY, C_CONF: ALLOW, OPEN: ALLOW}),
    ("x32 unshare, new user ns", X32 | 272, X86_64, NEWUSER, {DEFAULT: NOTIFY, C_CONF: NOTIFY}),
    ("x32 clone3", X32 | 435, X86_64, 0, {C_CONF: ENOSYS}),
    ("nr -1 (no syscall)", 0xFFFFFFFF, X86_64, 0, {STRICT: ALLOW, DEFAULT: ALLOW}),
    ("an unknown ABI", 1, 0x12345678, 0, {STRICT: NOTIFY, C_CONF: NOTIFY, OPEN: ALLOW}),
]


@pytest.mark.parametrize(("what", "nr", "arch", "arg0", "verdicts"), CASES, ids=[c[0] for c in CASES])
def test_filter_verdicts_on_x86_64(what: str, nr: int, arch: int, arg0: int, verdicts: dict) -> None:
    for rules, want in verdicts.items():
        assert run_filter(program(rules, X86), nr, arch, arg0) == want, (what, rules)


def test_filter_on_arm64_uses_its_own_numbers() -> None:
    prog = program(STRICT, ARM64)
    assert run_filter(prog, 97, AUDIT_AARCH64, NEWUSER) == NOTIFY  # unshare
    assert run_filter(prog, 272, AUDIT_AARCH64, NEWUSER) == ALLOW  # x86's unshare number: something else
    assert run_filter(prog, 435, AUDIT_AARCH64) == ENOSYS
    assert run_filter(prog, 56, AUDIT_ARM) == NOTIFY
    assert run_filter(prog, X32 | 2, AUDIT_AARCH64) == ALLOW  # no x32 on arm64: an ordinary bad number


@pytest.mark.parametrize(("rules", "arch", "nr", "want"), [
    (STRICT, AUDIT_I386, 5, ("compat_i386", errno.ENOSYS)),
    (STRICT, X86_64, X32 | 2, ("compat_x32", errno.ENOSYS)),
    (STRICT, 0x12345678, 1, ("compat_unknown", errno.ENOSYS)),
    (STRICT, X86_64, 425, ("io_uring", errno.EPERM)),
    (STRICT, X86_64, 272, ("user_namespace", errno.EPERM)),
    (STRICT, X86_64, 56, ("user_namespace", errno.EPERM)),
    (C_CONF, AUDIT_I386, 310, ("user_namespace", errno.EPERM)),
    (C_CONF, X86_64, X32 | 426, ("io_uring", errno.EPERM)),
])
def test_each_notification_is_answered_by_its_class(rules: Rules, arch: int, nr: int, want: tuple) -> None:
    assert classify(rules, X86, arch, nr) == want


# -- loaded for real, in a forked child, with its supervisor ---------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _errno_of(*args: object) -> int:
    ret = _libc.syscall(*args)
    if ret == 0 and args[0] == 56:
        os._exit(0)  # a clone's child
    if ret > 0 and args[0] == 56:
        os.waitpid(ret, 0)
    return ctypes.get_errno() if ret < 0 else 0


def _in_a_filtered_child(rules: Rules, body: Callable[[], dict], as_uid: int = 0) -> tuple[dict, dict]:
    """(what `body` returned in a forked child under `rules`' filter, the supervisor's counts)."""
    guard = Guard(rules, X86)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            if as_uid:
                os.setresuid(as_uid, as_uid, as_uid)  # no capability left
            guard.handover.apply()
            os.write(w, json.dumps(body()).encode())
        finally:
            os._exit(0)
    os.close(w)
    guard.start()
    with os.fdopen(r) as out:
        seen = json.loads(out.read())
    os.waitpid(pid, 0)
    try:
        return seen, guard.finish()
    finally:
        guard.close()


def _calls() -> dict:
    params = ctypes.create_string_buffer(120)
    return {
        "x32_getpid": _errno_of(X32 | 39),
        "io_uring_setup": _errno_of(425, 8, params),
        "clone_newuser": _errno_of(56, NEWUSER | SIGCHLD, None, None, None, None),
        "clone3": _errno_of(435, None, 0),
        "getpid": _errno_of(39),
    }


@pytest.mark.kernel
def test_a_loaded_filter_refuses_and_its_supervisor_counts() -> None:
    seen, counts = _in_a_filtered_child(STRICT, _calls)
    assert seen == {"x32_getpid": errno.ENOSYS, "io_uring_setup": errno.EPERM,
                    "clone_newuser": errno.EPERM, "clone3": errno.ENOSYS, "getpid": 0}
    assert counts == {"compat_x32": 1, "io_uring": 1, "user_namespace": 1}  # clone3: the filter's own


@pytest.mark.kernel
def test_without_confinement_only_compat_is_refused() -> None:
    seen, counts = _in_a_filtered_child(DEFAULT, _calls)
    assert seen["x32_getpid"] == errno.ENOSYS
    assert seen["clone_newuser"] == 0  # root may, without a sandbox (and is traced)
    assert seen["clone3"] == errno.EINVAL  # reached the kernel, which refuses a size of 0
    assert counts == {"compat_x32": 1}


def test_a_guard_whose_command_never_started_closes_cleanly() -> None:
    guard = Guard(STRICT, X86)
    guard.start()
    assert guard.finish() == {}
    guard.close()


@pytest.mark.kernel
def test_without_cap_sys_admin_the_filter_sets_no_new_privs_and_still_loads() -> None:
    def body() -> dict:
        with open("/proc/self/status") as status:
            nnp = next(line.split()[1] for line in status if line.startswith("NoNewPrivs:"))
        return {"nnp": nnp, "x32": _errno_of(X32 | 39)}

    seen, counts = _in_a_filtered_child(DEFAULT, body, as_uid=65534)
    assert seen == {"nnp": "1", "x32": errno.ENOSYS}
    assert counts == {"compat_x32": 1}
