"""Which of the monitor's tracepoints this kernel has: probed, never assumed.

Every `TRACEPOINT_PROBE(category, event)` in the monitor's source, and every
syscall whose exit the shared `on_sys_exit` joins, is looked up under tracefs
(`events/<category>/<event>/format`, the test BCC's `tracepoint_exists` makes).
A syscall hook is attached only when both its tracepoints exist; otherwise its
programs are compiled out (`prune`: BCC reads a tracepoint's layout when it
compiles a `TRACEPOINT_PROBE`, so a program for a missing one cannot even be
compiled) and the hook is recorded as missing, in one of two ways:

- `absent_by_kernel`: the kernel has no such syscall (its syscall table, read
  from /proc/kallsyms, has no `sys_<name>` entry point), so nothing can be made
  through it and nothing is lost: `fchmodat2` before Linux 6.6, `close_range`
  before 5.9;
- `lost`: the syscall exists but cannot be seen (its tracepoint is missing,
  or kallsyms cannot be read): what goes through it is missing from the
  evidence, and health says which (normalizer/health.py, `s2_kernel_hooks`).

A new hook needs nothing here: its `TRACEPOINT_PROBE` (or its name in
`JOINED_SYSCALLS`) is probed like the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ABSENT_BY_KERNEL = "absent_by_kernel"
LOST = "lost"
KALLSYMS = Path("/proc/kallsyms")
MIN_KERNEL = (5, 8)
"""The oldest kernel the monitor loads on: the BPF ring buffer (5.8); the network policy's
cgroup programs call bpf_get_current_ancestor_cgroup_id (5.7)."""
SYSCALL_SINCE = {"close_range": (5, 9), "fchmodat2": (6, 6), "setxattrat": (6, 13), "removexattrat": (6, 13)}
"""Hooked syscalls younger than MIN_KERNEL: the kernel where each appeared (for `doctor`)."""
OPTIONAL_FIELDS = {("sched", "sched_process_exit", "group_dead"): "NO_GROUP_DEAD"}
"""Tracepoint fields newer kernels added, and the define the C falls back on without them."""
_PROBE = re.compile(r"^TRACEPOINT_PROBE\((\w+),\s*(\w+)\)\n", re.MULTILINE)
_SYSCALL_EVENT = re.compile(r"sys_(?:enter|exit)_(\w+)")


class ProbeError(RuntimeError):
    """Tracefs itself is missing: no hook can be probed (not a per-hook absence)."""


@dataclass(frozen=True)
class HookPlan:
    """What this kernel offers the monitor's source: the hooks to attach and the ones it lacks."""

    attached: tuple[tuple[str, str], ...]
    """(category, event) of every tracepoint to attach, in source order (exits last)."""
    missing: dict[str, str]
    """Hook (a syscall's name, or `category:event`) -> ABSENT_BY_KERNEL or LOST."""

    @property
    def lost(self) -> list[str]:
        return sorted(k for k, v in self.missing.items() if v == LOST)

    @property
    def absent(self) -> list[str]:
        return sorted(k for k, v in self.missing.items() if v == ABSENT_BY_KERNEL)


def probes_in(source: str) -> list[tuple[str, str]]:
    """(category, event) of every `TRACEPOINT_PROBE` in `source`, in order."""
    return [(m.group(1), m.group(2)) for m in _PROBE.finditer(source)]


def plan(source: str, joined: tuple[str, ...], events: Path, kallsyms: Path = KALLSYMS) -> HookPlan:
    """Probe every tracepoint `source` and the joined exits need under `events` (tracefs)."""
    if not (events / "syscalls").is_dir():
        raise ProbeError(f"{events}/syscalls does not exist: tracefs is not mounted there, or the "
                         "kernel has no syscall tracepoints (CONFIG_FTRACE_SYSCALLS)")
    wanted = probes_in(source) + [("syscalls", f"sys_exit_{name}") for name in joined]
    missing_syscalls: set[str] = set()
    missing_other: set[str] = set()
    for category, event in wanted:
        if (events / category / event / "format").exists():
            continue
        syscall = _SYSCALL_EVENT.fullmatch(event) if category == "syscalls" else None
        if syscall:
            missing_syscalls.add(syscall.group(1))
        else:
            missing_other.add(f"{category}:{event}")
    table = syscall_table(kallsyms) if missing_syscalls else None
    missing = {name: LOST for name in missing_other}
    for name in missing_syscalls:
        missing[name] = ABSENT_BY_KERNEL if table is not None and name not in table else LOST
    attached = tuple((c, e) for c, e in wanted if not _dropped(c, e, missing_syscalls, missing_other))
    return HookPlan(attached=attached, missing=dict(sorted(missing.items())))


def _dropped(category: str, event: str, syscalls: set[str], other: set[str]) -> bool:
    syscall = _SYSCALL_EVENT.fullmatch(event) if category == "syscalls" else None
    return (syscall is not None and syscall.group(1) in syscalls) or f"{category}:{event}" in other


def field_defines(events: Path) -> list[str]:
    """`-D` flags for the OPTIONAL_FIELDS this kernel's tracepoints lack (none on a new kernel)."""
    flags = []
    for (category, event, name), define in sorted(OPTIONAL_FIELDS.items()):
        try:
            text = (events / category / event / "format").read_text()
        except OSError:
            continue  # the tracepoint itself is missing: plan() reports it
        if not re.search(rf"field:[^;]*\b{name};", text):
            flags.append(f"-D{define}")
    return flags


def syscall_table(kallsyms: Path = KALLSYMS) -> frozenset[str] | None:
    """Names of the syscalls this kernel implements (its `sys_*` entry points), or None if unknown.

    A syscall configured out can still have a weak `sys_ni_syscall` stub under its name: it is
    then taken to exist (a missing hook for it counts as lost: never a loss hidden).
    """
    try:
        text = kallsyms.read_text()
    except OSError:
        return None
    names = frozenset(re.findall(r"^\S+ [tTwW] (?:__(?:x64|ia32|arm64|riscv|s390x)_)?sys_(\w+)$",
                                 text, re.MULTILINE))
    return names or None


def prune(source: str, hooks: HookPlan) -> str:
    """`source` with the programs of missing tracepoints compiled out (`#if 0` around each)."""
    keep = set(hooks.attached)
    out: list[str] = []
    pos = 0
    for match in _PROBE.finditer(source):
        if (match.group(1), match.group(2)) in keep:
            continue
        end = source.find("\n}\n", match.end())
        if end < 0:
            raise ProbeError(f"cannot find the end of {match.group(0).strip()} (a '}}' alone on a line)")
        out += [source[pos:match.start()], "#if 0 /* tracepoint missing on this kernel */\n",
                source[match.start():end + 3], "#endif\n"]
        pos = end + 3
    out.append(source[pos:])
    return "".join(out)


def kernel_version(release: str) -> tuple[int, int]:
    """(major, minor) of a `uname -r` string."""
    match = re.match(r"(\d+)\.(\d+)", release)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def older_kernels() -> str:
    """What each kernel older than the newest hooked syscall loses, for `doctor`."""
    parts = [f"{name} before {a}.{b}" for name, (a, b) in sorted(SYSCALL_SINCE.items(), key=lambda kv: kv[1])]
    return (f"minimum Linux {MIN_KERNEL[0]}.{MIN_KERNEL[1]}; older kernels lack {', '.join(parts)}: "
            "absent-by-kernel, nothing is lost")
