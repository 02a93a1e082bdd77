"""Hooks probed on the real kernel: this host has every tracepoint, and a monitor compiled
for a kernel without one (fchmodat2, as on Linux < 6.6) compiles and lacks only its program.

Older kernels themselves are booted by tests/test_kernel_matrix.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from ebpf.monitor import AUTOLOAD_PREFIX, MonitorConfig, hook_plan, monitor_object
from ebpf.probing import ABSENT_BY_KERNEL

pytestmark = pytest.mark.kernel


def test_this_kernel_offers_every_hook() -> None:
    plan = hook_plan()
    assert plan.missing == {}
    assert ("syscalls", "sys_exit_fchmodat2") in plan.attached


def test_a_monitor_without_a_tracepoint_compiles_without_its_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_RUNNER_BPF_CACHE", "off")  # compile now, whatever is cached
    full = hook_plan()
    older = dataclasses.replace(
        full, attached=tuple(tp for tp in full.attached if not tp[1].endswith("_fchmodat2")),
        missing={"fchmodat2": ABSENT_BY_KERNEL})
    names = {p.name for p in monitor_object(MonitorConfig(), older)[0].programs}
    assert f"{AUTOLOAD_PREFIX}syscalls__sys_enter_fchmodat2" not in names
    assert f"{AUTOLOAD_PREFIX}syscalls__sys_enter_fchmodat" in names and "on_sys_exit" in names
