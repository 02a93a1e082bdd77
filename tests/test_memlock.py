"""ebpf/loader.py and RLIMIT_MEMLOCK: lifted only after the kernel refused a map or program, once,
and the limit before it kept for the command (runner/capture/spawn.py takes it back).

Kernels before 5.11 charge BPF memory to the locked-memory limit; the run under a 64 KiB limit
in tests/test_run_kernel.py is the end-to-end check on such a kernel (the matrix's 5.10 guest).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ebpf import loader
from tests.support import ROOT

LIFT = textwrap.dedent("""
    import json, resource
    from ebpf import loader
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))
    before = loader.memlock_before()
    first = loader._lift_memlock()
    now = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    print(json.dumps([before, first, now == (resource.RLIM_INFINITY,) * 2, loader.memlock_before(),
                      loader._lift_memlock()]))
""")


def test_the_limit_is_lifted_once_and_the_one_before_is_kept() -> None:
    proc = subprocess.run([sys.executable, "-c", LIFT], capture_output=True, text=True, cwd=ROOT, check=True)
    before, first, unlimited, kept, second = json.loads(proc.stdout)
    assert before is None and second is False
    if may_raise_hard_limits():
        assert (first, unlimited, kept) == (True, True, [65536, 65536])
    else:  # soft already at the hard limit, which only CAP_SYS_RESOURCE raises: nothing to take back
        assert (first, unlimited, kept) == (False, False, None)


def test_without_cap_sys_resource_the_soft_limit_rises_to_the_hard_one() -> None:
    code = LIFT.replace("(65536, 65536))", "(65536, 131072))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    _, first, unlimited, kept, second = json.loads(proc.stdout)
    assert (first, kept, second) == (True, [65536, 131072], False)
    assert unlimited == may_raise_hard_limits()


def may_raise_hard_limits() -> bool:
    """CAP_SYS_RESOURCE is effective (a container's root may lack it: this machine's does)."""
    with open("/proc/self/status") as status:
        eff = next(line for line in status if line.startswith("CapEff:"))
    return bool(int(eff.split()[1], 16) >> 24 & 1)


@pytest.mark.parametrize(("cmd", "lifts", "retried"), [
    (loader.BPF_MAP_CREATE, True, True),
    (loader.BPF_PROG_LOAD, True, True),
    (loader.BPF_PROG_LOAD, False, False),  # lifted before, or not allowed: the refusal stands
    (loader.BPF_RAW_TRACEPOINT_OPEN, True, False),  # an EPERM the limit cannot explain
])
def test_only_a_refused_map_or_program_is_retried_after_the_lift(
        monkeypatch: pytest.MonkeyPatch, cmd: int, lifts: bool, retried: bool) -> None:
    calls: list[int] = []

    def refuse_first(*_args: object) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise PermissionError(1, "Operation not permitted")
        return 7

    monkeypatch.setattr(loader, "_syscall", refuse_first)
    monkeypatch.setattr(loader, "_lift_memlock", lambda: lifts)
    attr = loader.ctypes.create_string_buffer(loader.ATTR_BYTES)
    if retried:
        assert loader._bpf(cmd, attr) == 7 and len(calls) == 2
    else:
        with pytest.raises(PermissionError):
            loader._bpf(cmd, attr)
        assert len(calls) == 1
