"""Hooks probed, never assumed (ebpf/probing.py): an older kernel's tracefs, simulated.

The fake tracefs holds every tracepoint the monitor wants except the ones a test
removes; the fake kallsyms says which syscalls the kernel implements. The real
kernel's plan and a compile of a pruned monitor are in tests/test_probing_kernel.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ebpf import probing
from ebpf.monitor import JOINED_SYSCALLS, monitor_source
from normalizer.health import CaptureFacts, observation_health

SOURCE = monitor_source()


def fake_tracefs(root: Path, without: set[str]) -> Path:
    """An `events` tree with a format file for every wanted tracepoint but those in `without`."""
    wanted = probing.probes_in(SOURCE) + [("syscalls", f"sys_exit_{n}") for n in JOINED_SYSCALLS]
    for category, event in wanted:
        if event not in without:
            folder = root / category / event
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "format").write_text("field:long ret;\toffset:16;\tsize:8;\n")
    return root


def fake_kallsyms(path: Path, syscalls: list[str]) -> Path:
    path.write_text("".join(f"ffffffff8100{i:04x} T __x64_sys_{n}\n" for i, n in enumerate(syscalls))
                    + "ffffffff81ff0000 t do_sys_open\n")
    return path


def test_every_wanted_tracepoint_present_is_attached_and_nothing_missing(tmp_path: Path) -> None:
    plan = probing.plan(SOURCE, JOINED_SYSCALLS, fake_tracefs(tmp_path, set()), tmp_path / "none")
    assert plan.missing == {}
    assert ("syscalls", "sys_enter_fchmodat2") in plan.attached
    assert ("syscalls", "sys_exit_openat") in plan.attached
    assert probing.prune(SOURCE, plan) == SOURCE


def test_a_syscall_the_kernel_lacks_is_absent_by_kernel_and_compiled_out(tmp_path: Path) -> None:
    events = fake_tracefs(tmp_path / "events", {"sys_enter_fchmodat2", "sys_exit_fchmodat2"})
    kallsyms = fake_kallsyms(tmp_path / "kallsyms", ["openat", "fchmodat", "chmod"])
    plan = probing.plan(SOURCE, JOINED_SYSCALLS, events, kallsyms)
    assert plan.missing == {"fchmodat2": probing.ABSENT_BY_KERNEL}
    assert (plan.absent, plan.lost) == (["fchmodat2"], [])
    assert not [e for _, e in plan.attached if e.endswith("_fchmodat2")]
    pruned = probing.prune(SOURCE, plan)
    block = pruned[pruned.index("#if 0"):]
    assert block.index("TRACEPOINT_PROBE(syscalls, sys_enter_fchmodat2)") < block.index("#endif")
    assert pruned.count("#if 0 /* tracepoint missing") == 1
    assert probing.probes_in(pruned) == probing.probes_in(SOURCE)  # the text is kept, inside #if 0


def test_a_syscall_the_kernel_has_but_cannot_trace_is_lost(tmp_path: Path) -> None:
    """Only the exit tracepoint is gone: the enter program goes too, and the hook is a loss."""
    events = fake_tracefs(tmp_path / "events", {"sys_exit_renameat2"})
    kallsyms = fake_kallsyms(tmp_path / "kallsyms", ["renameat2", "openat"])
    plan = probing.plan(SOURCE, JOINED_SYSCALLS, events, kallsyms)
    assert plan.missing == {"renameat2": probing.LOST}
    assert ("syscalls", "sys_enter_renameat2") not in plan.attached


def test_unreadable_kallsyms_never_hides_a_loss(tmp_path: Path) -> None:
    events = fake_tracefs(tmp_path / "events", {"sys_enter_fchmodat2", "sys_exit_fchmodat2"})
    plan = probing.plan(SOURCE, JOINED_SYSCALLS, events, tmp_path / "no-kallsyms")
    assert plan.missing == {"fchmodat2": probing.LOST}


def test_a_missing_non_syscall_tracepoint_is_lost_by_name(tmp_path: Path) -> None:
    events = fake_tracefs(tmp_path / "events", {"signal_generate"})
    plan = probing.plan(SOURCE, JOINED_SYSCALLS, events, fake_kallsyms(tmp_path / "k", []))
    assert plan.missing == {"signal:signal_generate": probing.LOST}


def test_no_tracefs_is_one_clear_error_not_a_list_of_missing_hooks(tmp_path: Path) -> None:
    with pytest.raises(probing.ProbeError, match="tracefs is not mounted there"):
        probing.plan(SOURCE, JOINED_SYSCALLS, tmp_path / "events")


def test_a_probe_without_a_closing_brace_line_is_refused(tmp_path: Path) -> None:
    source = "TRACEPOINT_PROBE(syscalls, sys_enter_x)\n{ return 0; }\n"
    plan = probing.HookPlan(attached=(), missing={"x": probing.LOST})
    with pytest.raises(probing.ProbeError, match="cannot find the end"):
        probing.prune(source, plan)


def test_a_tracepoint_field_older_kernels_lack_selects_the_fallback(tmp_path: Path) -> None:
    folder = tmp_path / "sched" / "sched_process_exit"
    folder.mkdir(parents=True)
    fmt = folder / "format"
    fmt.write_text("\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n")
    assert probing.field_defines(tmp_path) == ["-DNO_GROUP_DEAD"]
    fmt.write_text(fmt.read_text() + "\tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n")
    assert probing.field_defines(tmp_path) == []


def test_kernel_versions_and_what_older_kernels_lose() -> None:
    assert probing.kernel_version("6.1.0-56-amd64") == (6, 1)
    assert probing.kernel_version("6.18.44-fc-v669") == (6, 18)
    text = probing.older_kernels()
    assert text.startswith("minimum Linux 5.8;") and "fchmodat2 before 6.6" in text


def _health(missing: dict[str, str]) -> tuple[list[str], str]:
    facts = CaptureFacts(drops={}, emitted={}, captured=0, unattributed_events=0, root_seen=True,
                         unresolved_paths=0, hooks_missing=missing)
    h = observation_health("r", {"connect"}, 1, facts, extra_notes=[])
    return [n for n in h.notes if n.startswith("s2_kernel_hooks")], h.network_protocol_coverage


def test_health_says_absent_by_kernel_is_complete_and_a_lost_hook_is_not() -> None:
    assert _health({}) == ([], "connect_only")
    assert _health({"fchmodat2": "absent_by_kernel"}) == (
        ["s2_kernel_hooks: absent_by_kernel=fchmodat2 lost=none complete=true"], "connect_only")
    assert _health({"fchmodat2": "absent_by_kernel", "renameat2": "lost"})[0] == [
        "s2_kernel_hooks: absent_by_kernel=fchmodat2 lost=renameat2 complete=false"]
    assert _health({"sendto": "lost"})[1] == "unknown"  # peers may be missing
