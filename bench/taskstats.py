"""Each process's own peak RSS at its exit, from the kernel's taskstats (genetlink).

GNU time's `%M` is the largest `ru_maxrss` among the runner and the children
it waited for, and a child spawned by vfork + exec starts its `ru_maxrss` at
its parent's high-water mark: neither says how much the runner itself or its
live normalizer process used. The kernel sends a taskstats record for every
thread that exits on a CPU a listener registered for, built before the
thread drops its memory map: `hiwater_rss` there is the map's own high-water
mark (/proc's VmHWM at that moment; an exec starts a new map, so nothing of
the parent's peak is in it, while a fork without exec starts with the pages
it shares), with the thread's pid, its process (tgid), its parent and its
`comm`. `ExitListener` collects
those records while a measured command runs; `process_peaks` folds them into
one peak per process. Needs root (CAP_NET_ADMIN) and CONFIG_TASK_XACCT.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 3, 1, 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR = 0x2
TASKSTATS_CMD_GET, TASKSTATS_CMD_NEW = 1, 2
TASKSTATS_TYPE_STATS, TASKSTATS_TYPE_AGGR_PID = 3, 4
TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK = 3, 4
NLMSG = struct.Struct("=IHHII")
GENL = struct.Struct("=BBH")
NLATTR = struct.Struct("=HH")

# struct taskstats (linux/taskstats.h): fields are only ever appended, so these offsets hold for
# every version that has them; ac_tgid came with version 12 (Linux 5.19).
TS_VERSION = struct.Struct("=H")  # version, at 0
TS_COMM_AT, TS_COMM_LEN = 80, 32
TS_PID_PPID_AT, TS_PID_PPID = 128, struct.Struct("=II")  # ac_pid, ac_ppid
TS_TIMES_AT, TS_TIMES = 152, struct.Struct("=QQ")  # ac_utime, ac_stime (usec)
TS_HIWATER_AT, TS_HIWATER = 200, struct.Struct("=Q")  # hiwater_rss (KiB)
TS_TGID_AT, TS_TGID = 368, struct.Struct("=I")  # ac_tgid
TS_MIN_VERSION = 12
CPU_POSSIBLE = Path("/sys/devices/system/cpu/possible")
RCVBUF = 8 << 20
SO_RCVBUFFORCE = 33  # asm-generic/socket.h; root may exceed rmem_max


class TaskstatsError(RuntimeError):
    """The kernel refused the listener (not root, no taskstats) or records were lost."""


@dataclass(frozen=True)
class ThreadExit:
    """One exited thread, as the kernel's taskstats record describes it."""

    pid: int
    tgid: int
    ppid: int
    comm: str
    hiwater_rss_kib: int
    cpu_s: float


@dataclass(frozen=True)
class ProcessPeak:
    """One process's peak RSS: the largest high-water mark any of its threads reported at exit."""

    tgid: int
    ppid: int
    comm: str
    peak_rss_kib: int
    cpu_s: float
    """User+system CPU seconds of all its threads."""


def parse_stats(payload: bytes) -> ThreadExit:
    """A `struct taskstats` payload (TASKSTATS_TYPE_STATS) as a ThreadExit."""
    (version,) = TS_VERSION.unpack_from(payload, 0)
    if version < TS_MIN_VERSION or len(payload) < TS_TGID_AT + TS_TGID.size:
        raise TaskstatsError(f"taskstats version {version} lacks ac_tgid (needs {TS_MIN_VERSION}, 5.19)")
    comm = payload[TS_COMM_AT:TS_COMM_AT + TS_COMM_LEN].split(b"\0", 1)[0].decode(errors="replace")
    pid, ppid = TS_PID_PPID.unpack_from(payload, TS_PID_PPID_AT)
    utime, stime = TS_TIMES.unpack_from(payload, TS_TIMES_AT)
    (hiwater,) = TS_HIWATER.unpack_from(payload, TS_HIWATER_AT)
    (tgid,) = TS_TGID.unpack_from(payload, TS_TGID_AT)
    return ThreadExit(pid, tgid, ppid, comm, hiwater, (utime + stime) / 1e6)


def attrs(data: bytes) -> list[tuple[int, bytes]]:
    """The netlink attributes in `data`: (type without flag bits, payload) in order."""
    out, at = [], 0
    while at + NLATTR.size <= len(data):
        length, kind = NLATTR.unpack_from(data, at)
        if length < NLATTR.size:
            break
        out.append((kind & 0x3FFF, data[at + NLATTR.size:at + length]))
        at += (length + 3) & ~3
    return out


def messages(data: bytes) -> list[tuple[int, bytes]]:
    """The netlink messages in one datagram: (type, payload after the netlink header)."""
    out, at = [], 0
    while at + NLMSG.size <= len(data):
        length, kind, _flags, _seq, _pid = NLMSG.unpack_from(data, at)
        if length < NLMSG.size:
            break
        out.append((kind, data[at + NLMSG.size:at + length]))
        at += (length + 3) & ~3
    return out


def exits_in(data: bytes, family: int) -> list[ThreadExit]:
    """The thread exits one datagram from the taskstats family carries."""
    found = []
    for kind, payload in messages(data):
        if kind != family or len(payload) < GENL.size or payload[0] != TASKSTATS_CMD_NEW:
            continue
        for outer, nested in attrs(payload[GENL.size:]):
            if outer == TASKSTATS_TYPE_AGGR_PID:
                found += [parse_stats(inner) for t, inner in attrs(nested) if t == TASKSTATS_TYPE_STATS]
    return found


def process_peaks(exits: list[ThreadExit]) -> dict[int, ProcessPeak]:
    """One peak per process (tgid): the largest high-water mark of its threads (they share one map),
    the parent and comm its leader reported (the last exec's name), the CPU of all threads."""
    by_tgid: dict[int, list[ThreadExit]] = {}
    for e in exits:
        by_tgid.setdefault(e.tgid, []).append(e)
    peaks = {}
    for tgid, threads in by_tgid.items():
        leader = next((t for t in threads if t.pid == tgid), threads[-1])
        peaks[tgid] = ProcessPeak(tgid, leader.ppid, leader.comm, max(t.hiwater_rss_kib for t in threads),
                                  round(sum(t.cpu_s for t in threads), 6))
    return peaks


def descendants(peaks: dict[int, ProcessPeak], root: int) -> dict[int, ProcessPeak]:
    """The processes under `root` (its children, theirs, ...), by the parent each reported at exit."""
    children: dict[int, list[int]] = {}
    for p in peaks.values():
        children.setdefault(p.ppid, []).append(p.tgid)
    out, todo = {}, list(children.get(root, []))
    while todo:
        tgid = todo.pop()
        out[tgid] = peaks[tgid]
        todo += children.get(tgid, [])
    return out


def _request(family: int, cmd: int, attr: int, value: bytes, flags: int = NLM_F_REQUEST | NLM_F_ACK) -> bytes:
    body = GENL.pack(cmd, 1, 0) + NLATTR.pack(NLATTR.size + len(value), attr) + value
    body += b"\0" * (-len(body) % 4)
    return NLMSG.pack(NLMSG.size + len(body), family, flags, 1, 0) + body


class ExitListener:
    """Collects the taskstats exit records of every thread on the host while a `with` block runs.

    Only processes it is asked about afterwards are looked at (`peaks_under`), so other work on the
    host costs the harness a few hundred bytes per exit and nothing else. A full receive buffer
    (records lost) is counted in `lost` and makes `peaks_under` raise rather than report a partial
    tree. The listener's socket is its own: closing it unregisters it.
    """

    def __init__(self) -> None:
        self.exits: list[ThreadExit] = []
        self.lost = 0
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        self._sock.bind((0, 0))
        self._family = self._family_id()
        self._cpus = CPU_POSSIBLE.read_text().strip().encode() + b"\0"
        self._register()
        self._stop = threading.Event()
        self._draining = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="taskstats")

    def _family_id(self) -> int:
        self._sock.send(_request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0",
                                 NLM_F_REQUEST))
        for kind, payload in messages(self._sock.recv(65536)):
            _check_error(kind, payload, "looking up the TASKSTATS family")
            for attr, value in attrs(payload[GENL.size:]):
                if attr == CTRL_ATTR_FAMILY_ID:
                    return int.from_bytes(value[:2], "little")
        raise TaskstatsError("the kernel has no TASKSTATS netlink family (CONFIG_TASKSTATS)")

    def _register(self) -> None:
        """Registers for every CPU's exits and waits for the kernel's answer (raises when refused)."""
        self._sock.send(_request(self._family, TASKSTATS_CMD_GET, TASKSTATS_CMD_ATTR_REGISTER_CPUMASK,
                                 self._cpus))
        while True:
            data = self._sock.recv(1 << 16)
            self.exits += exits_in(data, self._family)
            if any(kind == NLMSG_ERROR for kind, _ in messages(data)):
                for kind, payload in messages(data):
                    _check_error(kind, payload, "registering the taskstats listener")
                return

    def __enter__(self) -> ExitListener:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            self._sock.send(_request(self._family, TASKSTATS_CMD_GET, TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK,
                                     self._cpus, NLM_F_REQUEST))
        self._sock.close()

    def _run(self) -> None:
        self._sock.settimeout(0.05)
        while not self._stop.is_set():
            if self._draining.is_set():
                self._stop.wait(0.005)
                continue
            with self._lock, contextlib.suppress(TimeoutError):
                self._receive()

    def _receive(self) -> None:
        """One datagram (blocking up to the socket's timeout); call with the lock held."""
        try:
            data = self._sock.recv(1 << 16)
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                raise
            self.lost += 1
            return
        self.exits += exits_in(data, self._family)

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        """The reader thread out of the way (between two receives) for the block."""
        self._draining.set()
        try:
            with self._lock:
                yield
        finally:
            self._draining.clear()

    def _drain(self) -> None:
        """Reads every record already queued; call paused. Each is queued by the exiting thread itself
        before its parent can reap it, so after a wait4 on a process its whole tree is in."""
        self._sock.settimeout(0)
        try:
            while True:
                self._receive()
        except BlockingIOError:
            pass
        finally:
            self._sock.settimeout(0.05)

    def forget(self) -> None:
        """Drops the records read so far (call before each measured run: pids are reused)."""
        with self._paused():
            self._drain()
            self.exits = []
            self.lost = 0

    def peaks_under(self, root: int) -> dict[int, ProcessPeak]:
        """Every exited process under `root`, with `root` itself when it has exited too; raises
        TaskstatsError when records were lost since `forget` (the tree could be partial)."""
        with self._paused():
            self._drain()
            if self.lost:
                raise TaskstatsError(f"{self.lost} taskstats datagrams lost (receive buffer full)")
            peaks = process_peaks(self.exits)
        return {**({root: peaks[root]} if root in peaks else {}), **descendants(peaks, root)}


def _check_error(kind: int, payload: bytes, doing: str) -> None:
    """Raises for a netlink error message (an ack has error 0)."""
    if kind == NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", payload, 0)
        if code:
            raise TaskstatsError(f"{doing}: {errno.errorcode.get(-code, -code)} ({-code})")
