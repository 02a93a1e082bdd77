"""The sensor: load and attach the kernel monitor, once.

`ebpf/monitor.c` (+ `changes.c`, `netpolicy.c`) is compiled by BCC only the first time
for a given source, flags, kernel and BCC (about 1.4 CPU seconds of clang
and LLVM); the compiled object is cached (ebpf/bpfobject.py) and loaded by
our own loader (ebpf/loader.py) in about 0.06 s, without importing BCC.
The tracepoint programs are BCC's `TRACEPOINT_PROBE`s (attached by name,
as BCC's autoload would) plus the shared `on_sys_exit`; the network
programs are loaded only when a run has a network policy (`attach_net`).

One loaded monitor serves any number of runs: a run is a key in its maps
(`add_run`: the run's cgroup in `run_cgroups`, its network rules in
`net_runs`/`net_rules`; `remove_run` undoes it and forgets the run's
tasks). Every record carries its run key (`struct assay_hdr.run`) and every
counter is kept per run slot (key % RUN_SLOTS), so one ring reader can
demultiplex (ebpf/observer.py). Direct mode loads it for its one run
(RUN_KEY); the daemon loads it once for its whole life.

The program submits records without waking the reader, except every
`WAKE_EVERY` records per CPU (about a quarter of the buffer); the caller also
drains it on a short timer with `drain()`. A wakeup per record would cost a
context switch per record: on 200k opens, about 1.9x slowdown against 1.3x.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import select
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ebpf import kpaths, probing
from ebpf.bpfobject import BpfObject, CompileError, compiled
from ebpf.holder import keep_only_kernel_objects
from ebpf.loader import (
    PROG_CGROUP_SOCK_ADDR,
    TRACEFS_EVENTS,
    LoadedObject,
    LoadError,
    Ring,
    link_create,
    prog_attach,
)
from ebpf.probing import HookPlan, ProbeError
from ebpf.wire import DEFAULT_RINGBUF_PAGES, HOOK_MAX, HOOK_NAMES, RUN_SLOTS

SOURCE_DIR = Path(__file__).resolve().parent
JOINED_SYSCALLS = (
    "openat", "openat2", "open", "creat", "connect", "sendto", "sendmsg", "chdir", "fchdir",
    "execve", "execveat", "unlink", "unlinkat", "rmdir", "rename", "renameat", "renameat2",
    "mkdir", "mkdirat", "mknod", "mknodat", "symlink", "symlinkat", "link", "linkat", "truncate",
    "chmod", "fchmodat", "fchmodat2", "fchmod", "dup", "dup2", "dup3", "fcntl", "open_by_handle_at",
    "unshare", "setns", "mount", "umount", "pivot_root", "chroot", "open_tree", "move_mount", "fsmount",
    "chown", "lchown", "fchownat", "fchown", "utimensat", "futimesat", "utimes", "utime",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "bind",
    "memfd_create",
    "ptrace", "process_vm_readv", "process_vm_writev",
)
"""Syscalls whose exit tracepoint runs the shared `on_sys_exit` program."""
OPTIONAL_SYSCALLS = ("setxattrat", "removexattrat")
"""Joined syscalls (Linux 6.13) whose enter programs sit under `#ifdef HAVE_SYS_<NAME>` in
ebpf/changes.c; probed like every hook (ebpf/probing.py): absent by kernel before 6.13."""


def optional_syscalls(events: Path = TRACEFS_EVENTS) -> tuple[str, ...]:
    """The OPTIONAL_SYSCALLS this kernel has tracepoints for."""
    return tuple(n for n in OPTIONAL_SYSCALLS if (events / "syscalls" / f"sys_enter_{n}" / "format").exists())
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
TASKS_MAX = 32768
"""Live tasks the lineage map can track at once; more are counted as untracked."""
HELD_MAX = 128
"""Interrupted calls waiting for their task's next call (monitor.c `held`, 8 KiB each); more are drops."""
RUN_KEY = 1
"""Direct mode's one run (the daemon gives each run its own key)."""
RUN_CGROUP_LEVEL = 2
"""Level of a run cgroup (`<cgroup2>/assay-runner/<run>`, runner/capture/cgroup.py)."""
TYPICAL_RECORD_BYTES = 128  # header, a short path and the ring's own record header


NET_RULES_MAX = 64
NET_PROGRAMS = (("net_connect4", 10), ("net_connect6", 11), ("net_sendmsg4", 14), ("net_sendmsg6", 15))
"""The cgroup sock_addr programs and their attach types (BPF_CGROUP_INET{4,6}_CONNECT, UDP{4,6}_SENDMSG)."""
AUTOLOAD_PREFIX = "tracepoint__"
RING_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
"""libbpf's ring_buffer_sample_fn as BCC and ebpf/ringsink.py declare it."""
AF_INET = 2
AF_INET6 = 10


@dataclass(frozen=True)
class NetRuleSpec:
    """One allow rule for the cgroup sock_addr programs (ebpf/netpolicy.h)."""

    family: int  # AF_INET or AF_INET6
    address: bytes  # 4 or 16 bytes, network order
    prefixlen: int
    port_lo: int
    port_hi: int
    protocol: int  # 0 any, 6 tcp, 17 udp

    def words(self) -> tuple[list[int], list[int]]:
        """(masked address, mask) as four native-endian u32 words of network-order bytes."""
        size = len(self.address)
        mask_int = ((1 << self.prefixlen) - 1) << (size * 8 - self.prefixlen) if self.prefixlen else 0
        mask = mask_int.to_bytes(size, "big").ljust(16, b"\0")
        addr = bytes(a & m for a, m in zip(self.address.ljust(16, b"\0"), mask, strict=True))
        return ([int.from_bytes(addr[i:i + 4], "little") for i in range(0, 16, 4)],
                [int.from_bytes(mask[i:i + 4], "little") for i in range(0, 16, 4)])


@dataclass(frozen=True)
class NetPolicySpec:
    """Network enforcement for the run's cgroup: allow rules plus a default."""

    rules: tuple[NetRuleSpec, ...]
    default_allow: bool


@dataclass(frozen=True)
class MonitorConfig:
    """What the compiled program is specialised for (the same for every run it serves)."""

    ringbuf_pages: int = DEFAULT_RINGBUF_PAGES
    tasks_max: int = TASKS_MAX
    run_level: int = RUN_CGROUP_LEVEL
    tasks_per_run: int = TASKS_MAX
    """A run slot's share of `tasks_max` (the daemon: an equal share per concurrent run)."""

    @property
    def wake_every(self) -> int:
        """Records per CPU between forced wakeups: about a quarter of the buffer."""
        return max(self.ringbuf_pages * PAGE_SIZE // 4 // TYPICAL_RECORD_BYTES, 1)


class MonitorError(RuntimeError):
    """The program could not be compiled or attached."""


@dataclass(frozen=True)
class RunCounters:
    """A run slot's counters: ring writes that failed and succeeded per hook, tasks not tracked."""

    drops: dict[str, int]
    emitted: dict[str, int]
    untracked: int
    hooks_missing: dict[str, str] = field(default_factory=dict)
    """Hooks this kernel lacks (ebpf/probing.py): name -> `absent_by_kernel` or `lost`."""
    path_source: str = kpaths.USER_MEMORY
    """Where open paths come from (ebpf/kpaths.py): `kernel` (security_file_open) or `user_memory`."""

    def since(self, start: RunCounters) -> RunCounters:
        """What was counted after `start` (a slot is reused by later runs: counters only grow)."""
        return RunCounters(
            drops={k: v - start.drops.get(k, 0) for k, v in self.drops.items()},
            emitted={k: v - start.emitted.get(k, 0) for k, v in self.emitted.items()},
            untracked=self.untracked - start.untracked,
            hooks_missing=self.hooks_missing,
            path_source=self.path_source,
        )


_RET_FIELD = re.compile(r"field:long ret;\s*offset:(\d+);\s*size:8;")


def sys_exit_ret_offset(names: list[str], events: Path = TRACEFS_EVENTS) -> int:
    """Offset of `ret` in the sys_exit_* records of `names`, read from tracefs, the same for all.

    This is how the shared exit program avoids hard-coding a kernel layout.
    """
    offsets = set()
    for name in names:
        fmt = events / "syscalls" / f"sys_exit_{name}" / "format"
        try:
            match = _RET_FIELD.search(fmt.read_text())
        except OSError as exc:
            raise MonitorError(f"cannot read {fmt}, which was there when probed: {exc.strerror}") from exc
        if match is None:
            raise MonitorError(f"{fmt} has no 'long ret' field: unexpected tracepoint layout")
        offsets.add(int(match.group(1)))
    if len(offsets) != 1:
        raise MonitorError(f"sys_exit_* tracepoints disagree on where 'ret' is: {sorted(offsets)}")
    return offsets.pop()


def monitor_source() -> str:
    """The monitor's whole C source, as written (before `probing.prune`)."""
    return "".join((SOURCE_DIR / name).read_text()
                   for name in ("monitor.c", "changes.c", "netpolicy.c", "kpath.c"))


def hook_plan(events: Path = TRACEFS_EVENTS) -> HookPlan:
    """Which of the monitor's tracepoints this kernel has (ebpf/probing.py)."""
    try:
        return probing.plan(monitor_source(), JOINED_SYSCALLS + OPTIONAL_SYSCALLS, events)
    except ProbeError as exc:
        raise MonitorError(str(exc)) from exc


def monitor_object(config: MonitorConfig, hooks: HookPlan | None = None,
                   kernel_paths: kpaths.KernelPaths | None = None) -> tuple[BpfObject, bool]:
    """The compiled monitor for `config` and whether it came from the cache (ebpf/bpfobject.py).

    Programs of the tracepoints `hooks` (default: this kernel's) lacks are compiled out; the
    source differs then, and so does the cache key. The kernel-path program (ebpf/kpath.c) is
    compiled in only when `kernel_paths` (default: this kernel's probe) says it can run.
    """
    hooks = hooks or hook_plan()
    joined = [name for name in JOINED_SYSCALLS + OPTIONAL_SYSCALLS if name not in hooks.missing]
    cflags = [
        f"-I{SOURCE_DIR}",
        f"-DTASKS_MAX={config.tasks_max}",
        f"-DTASKS_PER_RUN={config.tasks_per_run}",
        f"-DHELD_MAX={HELD_MAX}",
        f"-DRINGBUF_PAGES={config.ringbuf_pages}",
        f"-DWAKE_EVERY={config.wake_every}",
        f"-DSYS_EXIT_RET_OFFSET={sys_exit_ret_offset(joined)}",
        f"-DRUN_CGROUP_LEVEL={config.run_level}",
        f"-DNET_RULES_MAX={NET_RULES_MAX}",
        *(f"-DHAVE_SYS_{name.upper()}" for name in optional_syscalls()),
        "-Wno-ignored-attributes",
        "-Wno-macro-redefined",
        "-g0",  # no debug info: about 20 ms less compile, nothing here reads it
        *probing.field_defines(TRACEFS_EVENTS),
        *(kernel_paths or kpaths.probe()).cflags,
    ]
    try:
        source = probing.prune(monitor_source(), hooks)
    except ProbeError as exc:
        raise MonitorError(str(exc)) from exc
    return compiled(source, cflags, sorted(SOURCE_DIR.glob("*.h")))


class Monitor:
    """A loaded monitor: records go to `sink` as raw bytes, in ring order."""

    def __init__(self, config: MonitorConfig, sink: Callable[[bytes], None]) -> None:
        pages = config.ringbuf_pages
        if pages < 1 or pages & (pages - 1):
            raise MonitorError(f"ring buffer pages must be a power of two, got {pages}")
        self.config = config
        self.hooks = hook_plan()
        """What this kernel lets the monitor attach, and what it lacks (`hooks.missing`)."""
        self.kernel_paths = kpaths.probe()
        """Whether the kernel's own path of each open is recorded (ebpf/kpaths.py), and why not."""
        try:
            obj, self.from_cache = monitor_object(config, self.hooks, self.kernel_paths)
        except (CompileError, OSError) as exc:
            raise MonitorError(f"cannot compile the eBPF monitor: {exc}") from exc
        self._sink = sink
        self._net_links: list[int] = []
        self._ring: Ring | None = None
        """The ring's reader, chosen on first use (`open_ring`, else the Python sink): records wait
        in the ring until then."""
        try:
            self._obj = LoadedObject(obj)
        except (LoadError, OSError) as exc:
            raise MonitorError(f"cannot load the eBPF monitor: {exc}") from exc
        try:
            programs = set(self._obj.program_names)
            for category, event in self.hooks.attached:  # BCC's convention: tracepoint__<category>__<event>
                name = f"{AUTOLOAD_PREFIX}{category}__{event}"
                self._obj.attach_tracepoint(category, event, name if name in programs else "on_sys_exit")
        except (LoadError, OSError) as exc:
            self._obj.close()
            raise MonitorError(f"cannot attach the eBPF monitor: {exc}") from exc
        self._attach_kernel_paths()

    def _attach_kernel_paths(self) -> None:
        """Attach ebpf/kpath.c where the probe allowed it; a refusal now means user-memory paths
        (the reason is kept for `doctor`), never a monitor that does not start."""
        if not self.kernel_paths.available:
            return
        try:
            self._obj.attach_fentry(kpaths.PROGRAM, self.kernel_paths.btf_id)
        except (LoadError, OSError) as exc:
            self.kernel_paths = kpaths.KernelPaths(kpaths.USER_MEMORY, f"{kpaths.PROGRAM}: {exc}")

    # --- runs ----------------------------------------------------------------------------------

    def add_run(self, key: int, cgroup_id: int, net: NetPolicySpec | None) -> None:
        """Make `key` a run: its network rules first, then its cgroup (tasks joining it are tracked).

        Call before the run's first task joins the cgroup. `key % RUN_SLOTS`
        must be free (no live run on it) and not 0 (the unknown run).
        """
        slot = key % RUN_SLOTS
        if not slot or key >= 1 << 16:
            raise MonitorError(f"run key {key} is not usable (0 < key < 65536, key % {RUN_SLOTS} != 0)")
        self._set_net(slot, net)
        self._zero_live(slot)
        runs = self._obj.maps["run_cgroups"]
        runs[runs.Key(cgroup_id)] = runs.Leaf(key)

    def remove_run(self, key: int) -> int:
        """Forget run `key`: its cgroups, its rules and the tasks still tracked for it (returned).

        Called once its cgroup is empty; tasks that left it earlier (an
        escape, followed by lineage) stop being tracked here, so a later run
        on the same slot never inherits them. Safe to call twice.
        """
        runs = self._obj.maps["run_cgroups"]
        for k in [k for k, v in runs.items() if v.value == key]:
            with contextlib.suppress(KeyError):
                del runs[k]
        self._set_net(key % RUN_SLOTS, None)
        tasks = self._obj.maps["tasks"]
        stale = [k for k, v in tasks.items() if v.run == key]
        for k in stale:
            with contextlib.suppress(KeyError):
                del tasks[k]
        self._zero_live(key % RUN_SLOTS)
        held = self._obj.maps["held"]
        for k in [k for k, v in held.items() if v.args.run == key]:
            with contextlib.suppress(KeyError):
                del held[k]
        return len(stale)

    def _zero_live(self, slot: int) -> None:
        """The slot's count of live tracked tasks starts (and ends) at zero."""
        live = self._obj.maps["live_tasks"]
        live[live.Key(slot)] = live.Leaf(0)

    def _set_net(self, slot: int, net: NetPolicySpec | None) -> None:
        """Write a slot's network rules and then its header (`enforce` last: never half a policy)."""
        policies = self._obj.maps["net_runs"]
        header = policies.Leaf()
        policies[policies.Key(slot)] = header  # enforce = 0 while the rules change
        if net is None:
            return
        if len(net.rules) > NET_RULES_MAX:
            raise MonitorError(f"at most {NET_RULES_MAX} network rules, got {len(net.rules)}")
        table = self._obj.maps["net_rules"]
        rules = table.Leaf()
        for i, rule in enumerate(net.rules):
            leaf = rules.rule[i]
            leaf.family, leaf.proto = rule.family, rule.protocol
            leaf.proto_mask = 0xFFFFFFFF if rule.protocol else 0  # 0: any protocol
            leaf.port_lo, leaf.port_hi = rule.port_lo, rule.port_hi
            addr, mask = rule.words()
            for j in range(4):
                leaf.addr[j], leaf.mask[j] = addr[j], mask[j]
        table[table.Key(slot)] = rules
        header.enforce, header.n_rules, header.default_allow = 1, len(net.rules), int(net.default_allow)
        policies[policies.Key(slot)] = header

    def attach_net(self, cgroup_path: str | Path, *, link: bool = False) -> None:
        """Attach the connect/sendmsg programs to a cgroup (they police the runs below it).

        `link` (direct mode and the daemon, at the cgroup v2 root): a BPF
        link, which the kernel detaches when this process's fd closes,
        however it exits, and which leaves other programs in the subtree
        alone (multi-attach). Without (bench/netpolicy.py's per-run design,
        at a run's own cgroup, removed with it): a plain attach.
        """
        fd = os.open(cgroup_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name, kind in NET_PROGRAMS:
                prog = self._obj.program(name, PROG_CGROUP_SOCK_ADDR, kind)
                if link:
                    self._net_links.append(link_create(prog, fd, kind))
                else:
                    prog_attach(prog, fd, kind)
        except (LoadError, OSError) as exc:
            raise MonitorError(f"cannot attach the network policy programs: {exc}") from exc
        finally:
            os.close(fd)

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        """Send records to `sink` from now on (one Python call per record)."""
        self._sink = sink

    def open_ring(self, callback: object, ctx: int) -> None:
        """Read the ring with a C callback (a ctypes function pointer, ebpf/ringsink.py)
        and its context instead of the per-record Python sink; before the first wait/drain."""
        if self._ring is not None:
            raise MonitorError("the ring buffer already has its reader")
        self._ring = Ring(self._obj.maps["rb"].fd, callback, ctx)

    def _on_record(self, _ctx: int, data: int, size: int) -> int:
        self._sink(ctypes.string_at(data, size))
        return 0

    def _reader(self) -> Ring:
        if self._ring is None:
            self._ring = Ring(self._obj.maps["rb"].fd, RING_CALLBACK(self._on_record), None)
        return self._ring

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        """Sleep until the kernel forces a wakeup (buffer filling), `wake` is readable, or timeout."""
        ring = self._reader()
        if wake is None:
            ring.poll(timeout_ms)
            return
        select.select([ring.epoll_fd(), wake], [], [], timeout_ms / 1000)

    def ring_fd(self) -> int:
        """An fd that is readable when the kernel woke the ring's reader (the ring is filling)."""
        return self._reader().epoll_fd()

    def drain(self) -> None:
        """Hand every record currently in the ring buffer to the sink."""
        self._reader().consume()

    def counters(self, key: int) -> RunCounters:
        """The counters of run `key`'s slot since load (`RunCounters.since` for one run's share)."""
        per_cpu = self._obj.maps["counts"][ctypes.c_int(key % RUN_SLOTS)]  # one lookup
        return RunCounters(
            drops={name: sum(c.drops[hook] for c in per_cpu) for hook, name in HOOK_NAMES.items()},
            emitted={name: sum(c.emitted[hook] for c in per_cpu) for hook, name in HOOK_NAMES.items()},
            untracked=sum(c.untracked for c in per_cpu), hooks_missing=self.hooks.missing,
            path_source=self.kernel_paths.source)

    def unattributed(self) -> RunCounters:
        """Slot 0: what was counted where the kernel could not know the run."""
        return self.counters(0)

    def header_layout(self) -> list[tuple[str, int, int]]:
        """(field, offset, size) of `struct assay_hdr` as clang laid it out."""
        leaf = self._obj.maps["layout_probe"].Leaf
        return [(name, getattr(leaf, name).offset, getattr(leaf, name).size)
                for name, _ in leaf._fields_]

    def close(self) -> None:
        """Detach and unload everything, without making the caller wait.

        Network links close with their fds (`_net_links`, in this process).

        Releasing a tracepoint attachment waits for an RCU grace period:
        about 70 ms each, 1.4 s for our 20 hooks. A detached grandchild holds
        the last references and releases them in the background; the
        caller's own closes then only drop references and return at once.
        It keeps nothing else of ours open (ebpf/holder.py). Nothing of the
        run's can match afterwards: its cgroup is gone.
        """
        done_r, done_w = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            try:
                os.setsid()
                if os.fork() == 0:
                    os.close(done_w)
                    keep_only_kernel_objects((done_r,))
                    os.read(done_r, 1)  # EOF once the caller dropped its references
            finally:
                os._exit(0)
        os.close(done_r)
        os.waitpid(child, 0)
        if self._ring is not None:
            self._ring.free()
        for fd in self._net_links:
            os.close(fd)
        self._net_links.clear()
        self._obj.close()
        os.close(done_w)


class RunLedger:
    """One run's share of the sensor's counters, for its spool trailer and its health.

    Its own slot since the run started, and, named `unattributed_<hook>`,
    the drops the kernel could not attribute to any run while it was live
    (slot 0): they may be this run's, so every live run reports them rather
    than none.
    """

    def __init__(self, monitor: Monitor, key: int) -> None:
        self._monitor = monitor
        self.key = key
        self._start = monitor.counters(key)
        self._unknown = monitor.unattributed()

    def counters(self) -> RunCounters:
        own = self._monitor.counters(self.key).since(self._start)
        unknown = self._monitor.unattributed().since(self._unknown)
        extra = {f"unattributed_{k}": v for k, v in unknown.drops.items() if v}
        return RunCounters(drops={**own.drops, **extra}, emitted=own.emitted,
                           untracked=own.untracked + unknown.untracked, hooks_missing=own.hooks_missing,
                           path_source=own.path_source)


assert max(HOOK_NAMES) < HOOK_MAX
