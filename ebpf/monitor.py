"""Compile, attach and drain the kernel monitor (the only BCC user).

The program submits records without waking the reader, except every
`WAKE_EVERY` records per CPU (about a quarter of the buffer); the caller also
drains it on a short timer with `drain()`. Measured on 200k opens this cut the workload's slowdown from
about 1.9x (a wakeup per record) to about 1.3x (docs/architecture.md).
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ebpf.wire import HOOK_MAX, HOOK_NAMES

SOURCE_DIR = Path(__file__).resolve().parent
TRACEFS_EVENTS = Path("/sys/kernel/tracing/events")
JOINED_SYSCALLS = (
    "openat", "openat2", "open", "creat", "connect", "sendto", "sendmsg", "chdir", "fchdir",
    "execve", "execveat", "unlink", "unlinkat", "rmdir", "rename", "renameat", "renameat2",
    "mkdir", "mkdirat", "mknod", "mknodat", "symlink", "symlinkat", "link", "linkat", "truncate",
    "chmod", "fchmodat", "fchmodat2", "fchmod", "dup", "dup2", "dup3", "fcntl", "open_by_handle_at",
)
"""Syscalls whose exit tracepoint runs the shared `on_sys_exit` program."""
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
DEFAULT_RINGBUF_PAGES = 1024  # 4 MiB: zero drops on our open-heavy benchmark
TASKS_MAX = 32768
"""Live tasks the lineage map can track at once; more are counted as untracked."""
RUN_KEY = 1
"""This process's one run (a daemon would give each run its own key)."""
TYPICAL_RECORD_BYTES = 128  # header, a short path and the ring's own record header


NET_RULES_MAX = 64
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
    """What the compiled program is specialised for, and the run's cgroup (v2 id)."""

    cgroup_id: int
    ringbuf_pages: int = DEFAULT_RINGBUF_PAGES
    net_policy: NetPolicySpec | None = None
    cgroup_path: str = ""
    tasks_max: int = TASKS_MAX

    @property
    def wake_every(self) -> int:
        """Records per CPU between forced wakeups: about a quarter of the buffer."""
        return max(self.ringbuf_pages * PAGE_SIZE // 4 // TYPICAL_RECORD_BYTES, 1)


class MonitorError(RuntimeError):
    """The program could not be compiled or attached."""


_RET_FIELD = re.compile(r"field:long ret;\s*offset:(\d+);\s*size:8;")


def sys_exit_ret_offset(events: Path = TRACEFS_EVENTS) -> int:
    """Offset of `ret` in the sys_exit_* records, read from tracefs, the same for all of ours.

    This is how the shared exit program avoids hard-coding a kernel layout.
    """
    offsets = set()
    for name in JOINED_SYSCALLS:
        fmt = events / "syscalls" / f"sys_exit_{name}" / "format"
        try:
            match = _RET_FIELD.search(fmt.read_text())
        except OSError as exc:
            raise MonitorError(f"cannot read {fmt}: {exc.strerror}; is tracefs mounted?") from exc
        if match is None:
            raise MonitorError(f"{fmt} has no 'long ret' field: unexpected tracepoint layout")
        offsets.add(int(match.group(1)))
    if len(offsets) != 1:
        raise MonitorError(f"sys_exit_* tracepoints disagree on where 'ret' is: {sorted(offsets)}")
    return offsets.pop()


class Monitor:
    """A loaded monitor: records go to `sink` as raw bytes, in ring order."""

    def __init__(self, config: MonitorConfig, sink: Callable[[bytes], None]) -> None:
        pages = config.ringbuf_pages
        if pages < 1 or pages & (pages - 1):
            raise MonitorError(f"ring buffer pages must be a power of two, got {pages}")
        try:
            from bcc import BPF  # Debian python3-bpfcc
        except ImportError as exc:  # pragma: no cover - checked by doctor
            raise MonitorError(f"cannot import bcc ({exc}); install python3-bpfcc") from exc
        cflags = [
            f"-I{SOURCE_DIR}",
            f"-DTASKS_MAX={config.tasks_max}",
            f"-DRINGBUF_PAGES={pages}",
            f"-DWAKE_EVERY={config.wake_every}",
            f"-DSYS_EXIT_RET_OFFSET={sys_exit_ret_offset()}",
            "-Wno-ignored-attributes",
            "-Wno-macro-redefined",
            "-g0",  # no debug info: about 20 ms less compile, nothing here reads it
        ]
        net = config.net_policy
        if net is not None:
            if len(net.rules) > NET_RULES_MAX:
                raise MonitorError(f"at most {NET_RULES_MAX} network rules, got {len(net.rules)}")
            cflags += [f"-DNET_RULES_MAX={NET_RULES_MAX}",
                       f"-DN_NET_RULES={len(net.rules)}", f"-DNET_DEFAULT_ALLOW={int(net.default_allow)}"]
        try:
            source = (SOURCE_DIR / "monitor.c").read_text()
            if net is not None:
                source += (SOURCE_DIR / "netpolicy.c").read_text()
            self._bpf = BPF(text=source.encode(), cflags=cflags)
        except Exception as exc:
            raise MonitorError(f"cannot load the eBPF monitor: {exc}") from exc
        self._sink = sink
        runs = self._bpf[b"run_cgroups"]
        runs[runs.Key(config.cgroup_id)] = runs.Leaf(RUN_KEY)
        try:
            for name in JOINED_SYSCALLS:
                self._bpf.attach_tracepoint(tp=f"syscalls:sys_exit_{name}".encode(), fn_name=b"on_sys_exit")
        except Exception as exc:
            raise MonitorError(f"cannot attach the syscall exit program: {exc}") from exc
        self._bpf[b"rb"].open_ring_buffer(self._on_record)
        if net is not None:
            self._attach_net_policy(net, config.cgroup_path)

    def _attach_net_policy(self, net: NetPolicySpec, cgroup_path: str) -> None:
        """Fill the rule table and attach connect/sendmsg programs to the run's cgroup."""
        from bcc import BPF, BPFAttachType

        table = self._bpf[b"net_rules"]
        for i, rule in enumerate(net.rules):
            leaf = table.Leaf()
            leaf.family, leaf.proto = rule.family, rule.protocol
            leaf.port_lo, leaf.port_hi = rule.port_lo, rule.port_hi
            addr, mask = rule.words()
            for j in range(4):
                leaf.addr[j], leaf.mask[j] = addr[j], mask[j]
            table[table.Key(i)] = leaf
        fd = os.open(cgroup_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name, kind in (
                (b"net_connect4", BPFAttachType.CGROUP_INET4_CONNECT),
                (b"net_connect6", BPFAttachType.CGROUP_INET6_CONNECT),
                (b"net_sendmsg4", BPFAttachType.CGROUP_UDP4_SENDMSG),
                (b"net_sendmsg6", BPFAttachType.CGROUP_UDP6_SENDMSG),
            ):
                fn = self._bpf.load_func(name, BPF.CGROUP_SOCK_ADDR, attach_type=kind)
                BPF.attach_func(fn, fd, kind)
        except Exception as exc:
            raise MonitorError(f"cannot attach the network policy programs: {exc}") from exc
        finally:
            os.close(fd)

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        """Send records to `sink` from now on."""
        self._sink = sink

    def _on_record(self, _ctx: int, data: int, size: int) -> int:
        self._sink(ctypes.string_at(data, size))
        return 0

    def wait(self, timeout_ms: int) -> None:
        """Sleep until the kernel forces a wakeup (buffer filling) or timeout."""
        self._bpf.ring_buffer_poll(timeout_ms)

    def drain(self) -> None:
        """Hand every record currently in the ring buffer to the sink."""
        self._bpf.ring_buffer_consume()

    def _per_hook(self, table: str) -> dict[str, int]:
        values = self._bpf[table.encode()]
        out: dict[str, int] = {}
        for hook, name in HOOK_NAMES.items():
            out[name] = sum(values[ctypes.c_int(hook)])
        return out

    def drops(self) -> dict[str, int]:
        """Failed ring-buffer writes per hook since load."""
        return self._per_hook("drops")

    def emitted(self) -> dict[str, int]:
        """Successful ring-buffer writes per hook since load."""
        return self._per_hook("emitted")

    def untracked(self) -> int:
        """Tasks of the run the full lineage map could not take (their events are missing)."""
        return sum(self._bpf[b"untracked"][ctypes.c_int(0)])

    def header_layout(self) -> list[tuple[str, int, int]]:
        """(field, offset, size) of `struct assay_hdr` as clang laid it out."""
        leaf = self._bpf[b"layout_probe"].Leaf
        return [(name, getattr(leaf, name).offset, getattr(leaf, name).size)
                for name, _ in leaf._fields_]

    def close(self) -> None:
        """Detach and unload everything, without making the caller wait.

        Releasing a tracepoint attachment waits for an RCU grace period:
        about 70 ms each, 1.4 s for our 20 hooks. A detached grandchild holds
        the last references and releases them in the background; the
        caller's own closes then only drop references and return at once.
        Nothing of the run's can match afterwards: its cgroup is gone.
        """
        done_r, done_w = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            try:
                os.setsid()
                if os.fork() == 0:
                    devnull = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1, 2):  # never hold the caller's pipes open
                        os.dup2(devnull, fd)
                    os.close(done_w)
                    os.read(done_r, 1)  # EOF once the caller dropped its references
                    self._bpf.cleanup()
            finally:
                os._exit(0)
        os.close(done_r)
        os.waitpid(child, 0)
        self._bpf.cleanup()
        os.close(done_w)


assert max(HOOK_NAMES) < HOOK_MAX
