"""Load a compiled BPF object (ebpf/bpfobject.py) into the kernel without a compiler.

BCC 0.26 can only load from C source, and compiling the monitor costs
about 1.4 CPU seconds (clang and LLVM), most of a direct run's start-up.
The compiled bytecode for one source, flags and kernel never changes, so
it is compiled once and cached; this module is what loads it: maps with
`bpf(BPF_MAP_CREATE)`, programs with `bpf(BPF_PROG_LOAD)` (map references
patched to the new map fds), tracepoints through `perf_event_open`, map
elements and the ring buffer through libbpf. No BCC import, no libbcc.

Everything it creates is a file descriptor owned by `LoadedObject`;
`close()` closes them all, which detaches and unloads (the kernel does the
rest when the last reference goes, also for a process that dies).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import platform
import resource
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ebpf.bpfobject import BpfObject, MapSpec

TRACEFS_EVENTS = Path("/sys/kernel/tracing/events")
BPF_MAP_CREATE, BPF_PROG_LOAD, BPF_RAW_TRACEPOINT_OPEN = 0, 5, 17
BPF_PSEUDO_MAP_FD = 1
BPF_LD_IMM64 = 0x18
PROG_TRACEPOINT = 5
PROG_CGROUP_SOCK_ADDR = 18
PROG_TRACING = 26
TRACE_FENTRY = 24
PERCPU_MAP_TYPES = frozenset({5, 6, 10})  # percpu hash, percpu array, lru percpu hash
PERF_TYPE_TRACEPOINT = 2
PERF_SAMPLE_RAW = 1 << 10
PERF_FLAG_FD_CLOEXEC = 8
PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_SET_BPF = 0x40042408
ATTR_BYTES = 128  # larger than every field we set; the kernel requires the tail to be zero
LOG_BYTES = 1 << 20
OBJ_NAME_LEN = 16
SYSCALLS = {"x86_64": (321, 298), "aarch64": (280, 241)}
"""Machine -> (bpf, perf_event_open) syscall numbers."""

_SCALARS: dict[str, Any] = {
    "_Bool": ctypes.c_bool, "char": ctypes.c_char, "unsigned char": ctypes.c_ubyte,
    "short": ctypes.c_short, "unsigned short": ctypes.c_ushort, "int": ctypes.c_int,
    "unsigned int": ctypes.c_uint, "long": ctypes.c_long, "unsigned long": ctypes.c_ulong,
    "long long": ctypes.c_longlong, "unsigned long long": ctypes.c_ulonglong,
}
"""The C types BCC's table descriptions name, as BCC's own decoder maps them (`BPF.str2ctype`)."""


class LoadError(RuntimeError):
    """The kernel refused a map, a program or an attachment (the message says which and why)."""


def decode_type(desc: Any) -> Any:
    """The ctypes type for one of BCC's JSON table type descriptions (as `BPF._decode_table_type`)."""
    if isinstance(desc, str):
        if desc not in _SCALARS:
            raise LoadError(f"unsupported map key/value type {desc!r}")
        return _SCALARS[desc]
    fields: list[tuple[Any, ...]] = []
    anon: list[str] = []
    for field in desc[1]:
        if len(field) == 2:
            fields.append((field[0], decode_type(field[1])))
        elif isinstance(field[2], list):
            fields.append((field[0], decode_type(field[1]) * field[2][0]))
        elif isinstance(field[2], int):
            fields.append((field[0], decode_type(field[1]), field[2]))
        elif field[2] in ("struct", "union", "struct_packed"):
            name = field[0] or f"__anon{len(anon)}"
            if not field[0]:
                anon.append(name)
            fields.append((name, decode_type(field)))
        else:
            raise LoadError(f"unsupported map key/value type {field!r}")
    kind = desc[2] if len(desc) > 2 else "struct"
    base = ctypes.Union if kind == "union" else ctypes.Structure
    body: dict[str, Any] = {"_anonymous_": anon, "_fields_": fields}
    if kind == "struct_packed":
        body["_pack_"] = 1
    return type(str(desc[0]), (base,), body)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def libbpf() -> ctypes.CDLL:
    """libbpf, for map elements, the ring buffer and cgroup attachment (stable C signatures)."""
    lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
    vp, i = ctypes.c_void_p, ctypes.c_int
    for name, restype, argtypes in (
        ("bpf_map_lookup_elem", i, [i, vp, vp]),
        ("bpf_map_update_elem", i, [i, vp, vp, ctypes.c_uint64]),
        ("bpf_map_delete_elem", i, [i, vp]),
        ("bpf_map_get_next_key", i, [i, vp, vp]),
        ("bpf_prog_attach", i, [i, i, i, ctypes.c_uint]),
        ("bpf_link_create", i, [i, i, i, vp]),
        ("ring_buffer__new", vp, [i, vp, vp, vp]),
        ("ring_buffer__poll", i, [vp, i]),
        ("ring_buffer__consume", i, [vp]),
        ("ring_buffer__epoll_fd", i, [vp]),
        ("ring_buffer__free", None, [vp]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def _syscall(index: int, *args: Any) -> int:
    """A raw syscall (bpf or perf_event_open); OSError on failure."""
    numbers = SYSCALLS.get(platform.machine())
    if numbers is None:
        raise LoadError(f"no bpf syscall number known for {platform.machine()}")
    ret = _libc().syscall(ctypes.c_long(numbers[index]), *args)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(ret)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    try:
        return _syscall(0, ctypes.c_int(cmd), attr, ctypes.c_uint(ATTR_BYTES))
    except PermissionError:
        if cmd not in (BPF_MAP_CREATE, BPF_PROG_LOAD) or not _lift_memlock():
            raise
    return _syscall(0, ctypes.c_int(cmd), attr, ctypes.c_uint(ATTR_BYTES))


_memlock_before: tuple[int, int] | None = None


def _lift_memlock() -> bool:
    """Lift RLIMIT_MEMLOCK once, after a refused map or program: True when it was lifted now.

    Before Linux 5.11 the kernel charges BPF maps and programs to the locked-memory limit, not
    to the memory cgroup, and refuses with EPERM past it: Debian 11's 5.10 cannot create the
    monitor's maps under the usual 8 MiB. Later kernels never refuse for that, so the limit is
    only touched where it is the reason. The command must not inherit it: see `memlock_before`.
    """
    global _memlock_before
    if _memlock_before is not None:
        return False
    before = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    # unlimited needs CAP_SYS_RESOURCE (a container's root may lack it); else up to the hard limit
    for lifted in ((resource.RLIM_INFINITY, resource.RLIM_INFINITY), (before[1], before[1])):
        if lifted == before:
            return False
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, lifted)
        except (OSError, ValueError):
            continue
        _memlock_before = before
        return True
    return False


def memlock_before() -> tuple[int, int] | None:
    """The locked-memory limit this process had before `_lift_memlock` (None: never lifted), for
    the command's process to take back before it executes."""
    return _memlock_before


def _check(ret: int, what: str) -> None:
    if ret < 0:
        err = ctypes.get_errno() or -ret
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prog_attach(prog_fd: int, target_fd: int, attach_type: int) -> None:
    """bpf(BPF_PROG_ATTACH): a cgroup attachment that lasts as long as the cgroup (or a detach)."""
    _check(libbpf().bpf_prog_attach(prog_fd, target_fd, attach_type, 0), "bpf_prog_attach")


def link_create(prog_fd: int, target_fd: int, attach_type: int) -> int:
    """bpf(BPF_LINK_CREATE): a cgroup attachment that ends with its fd."""
    fd = libbpf().bpf_link_create(prog_fd, target_fd, attach_type, None)
    _check(fd, "bpf_link_create")
    os.set_inheritable(fd, False)
    return int(fd)


@functools.cache
def possible_cpus() -> int:
    """How many values a per-CPU map holds per key (the kernel sizes them by possible CPUs)."""
    count = 0
    for part in Path("/sys/devices/system/cpu/possible").read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


class BpfMap:
    """One map: `Key`/`Leaf` ctypes types and dict-like element access (BCC's table subset we use)."""

    def __init__(self, spec: MapSpec, fd: int) -> None:
        self.name = spec.name
        self.fd = fd
        self.Key = decode_type(json.loads(spec.key_desc))
        self.Leaf = decode_type(json.loads(spec.leaf_desc))
        self._value = self.Leaf
        if spec.type in PERCPU_MAP_TYPES:  # one leaf per possible CPU, each padded to 8 bytes
            if ctypes.sizeof(self.Leaf) % 8:
                raise LoadError(f"per-CPU map {spec.name}: value size must be a multiple of 8")
            self._value = self.Leaf * possible_cpus()

    def __getitem__(self, key: Any) -> Any:
        value = self._value()
        if libbpf().bpf_map_lookup_elem(self.fd, ctypes.byref(key), ctypes.byref(value)) < 0:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        _check(libbpf().bpf_map_update_elem(self.fd, ctypes.byref(key), ctypes.byref(value), 0),
               f"update of map {self.name}")

    def __delitem__(self, key: Any) -> None:
        if libbpf().bpf_map_delete_elem(self.fd, ctypes.byref(key)) < 0:
            raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return self.keys()

    def keys(self) -> Iterator[Any]:
        """Every key, as the kernel walks them (a key deleted meanwhile may restart the walk)."""
        lib = libbpf()
        key, following = self.Key(), self.Key()
        previous = None
        while lib.bpf_map_get_next_key(self.fd, previous, ctypes.byref(following)) == 0:
            ctypes.memmove(ctypes.byref(key), ctypes.byref(following), ctypes.sizeof(key))
            yield type(key).from_buffer_copy(key)
            previous = ctypes.byref(key)

    def items(self) -> list[tuple[Any, Any]]:
        """(key, value) pairs; a key deleted between the walk and the lookup is left out."""
        out = []
        for key in self.keys():
            with contextlib.suppress(KeyError):
                out.append((key, self[key]))
        return out


class RingError(OSError):
    """Reading the ring failed: libbpf's error, or the negative code a callback stopped it with
    (`errno` holds it). Never swallowed: records may be lost (ebpf/ringsink.py tells its own
    pauses from errors)."""


class Ring:
    """A libbpf ring buffer reader calling `callback(ctx, data, size)` per record.

    `poll` and `consume` raise `RingError` on a negative return: libbpf stops at a callback's
    negative return or a failed epoll_wait, and a silent stop would read as a quiet ring. A
    poll interrupted by a signal (EINTR) is not an error: the next wait reads on.
    """

    def __init__(self, map_fd: int, callback: Any, ctx: int | None) -> None:
        self._callback = callback  # kept alive as long as libbpf may call it
        self.handle = libbpf().ring_buffer__new(map_fd, ctypes.cast(callback, ctypes.c_void_p),
                                                ctypes.c_void_p(ctx), None)
        if not self.handle:
            err = ctypes.get_errno()
            raise LoadError(f"cannot open the ring buffer: {os.strerror(err)}")

    def poll(self, timeout_ms: int) -> None:
        ret = libbpf().ring_buffer__poll(self.handle, timeout_ms)
        if ret < 0 and ret != -errno.EINTR:
            raise RingError(-ret, f"reading the ring buffer (poll): {os.strerror(-ret)}")

    def consume(self) -> None:
        ret = libbpf().ring_buffer__consume(self.handle)
        if ret < 0:
            raise RingError(-ret, f"reading the ring buffer (consume): {os.strerror(-ret)}")

    def epoll_fd(self) -> int:
        return int(libbpf().ring_buffer__epoll_fd(self.handle))

    def free(self) -> None:
        if self.handle:
            libbpf().ring_buffer__free(self.handle)
            self.handle = None


class LoadedObject:
    """A `BpfObject`'s maps, created now; its programs loaded on first use."""

    def __init__(self, obj: BpfObject) -> None:
        self._obj = obj
        self._programs = {p.name: p for p in obj.programs}
        self._prog_fds: dict[str, int] = {}
        self._perf_fds: list[int] = []
        self.maps: dict[str, BpfMap] = {}
        try:
            for spec in obj.maps:
                self.maps[spec.name] = BpfMap(spec, _create_map(spec))
        except BaseException:
            self.close()
            raise

    @property
    def program_names(self) -> list[str]:
        return [p.name for p in self._obj.programs]

    def program(self, name: str, prog_type: int, attach_type: int = 0, attach_btf_id: int = 0) -> int:
        """The fd of program `name`, loaded (and verified) the first time it is asked for."""
        if name in self._prog_fds:
            return self._prog_fds[name]
        spec = self._programs.get(name)
        if spec is None:
            raise LoadError(f"no program {name} in the object")
        insns = bytearray(spec.insns)
        for index, map_name in spec.relocs:
            struct.pack_into("<i", insns, index * 8 + 4, self.maps[map_name].fd)
        fd = load_program(name, prog_type, attach_type, bytes(insns), self._obj.license, attach_btf_id)
        self._prog_fds[name] = fd
        return fd

    def attach_fentry(self, program: str, btf_id: int) -> None:
        """Run `program` at the entry of the kernel function with BTF id `btf_id` until `close()`."""
        prog_fd = self.program(program, PROG_TRACING, TRACE_FENTRY, btf_id)
        try:
            self._perf_fds.append(raw_tracepoint_open(prog_fd))
        except OSError as exc:
            raise LoadError(f"cannot attach {program}: {exc.strerror}") from exc

    def attach_tracepoint(self, category: str, event: str, program: str) -> None:
        """Run `program` on tracepoint `category:event` until `close()`."""
        prog_fd = self.program(program, PROG_TRACEPOINT)
        id_file = TRACEFS_EVENTS / category / event / "id"
        try:
            tp_id = int(id_file.read_text())
        except OSError as exc:
            raise LoadError(f"cannot read {id_file}: {exc.strerror}") from exc
        attr = ctypes.create_string_buffer(ATTR_BYTES)
        # type, size, config (the tracepoint id), sample_period, sample_type; wakeup_events at 48
        struct.pack_into("<IIQQQ", attr, 0, PERF_TYPE_TRACEPOINT, ATTR_BYTES, tp_id, 1, PERF_SAMPLE_RAW)
        struct.pack_into("<I", attr, 48, 1)
        try:
            fd = _syscall(1, attr, ctypes.c_int(-1), ctypes.c_int(0), ctypes.c_int(-1),
                          ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
        except OSError as exc:
            raise LoadError(f"cannot open tracepoint {category}:{event}: {exc.strerror}") from exc
        self._perf_fds.append(fd)
        for request, arg in ((PERF_EVENT_IOC_SET_BPF, prog_fd), (PERF_EVENT_IOC_ENABLE, 0)):
            if _libc().ioctl(fd, ctypes.c_ulong(request), ctypes.c_int(arg)) < 0:
                err = ctypes.get_errno()
                raise LoadError(f"cannot attach {program} to {category}:{event}: {os.strerror(err)}")

    def close(self) -> None:
        """Close every fd: tracepoints first, then programs, then maps (safe to call twice)."""
        for fd in [*self._perf_fds, *self._prog_fds.values(), *(m.fd for m in self.maps.values())]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._perf_fds.clear()
        self._prog_fds.clear()
        self.maps.clear()


def _create_map(spec: MapSpec) -> int:
    attr = ctypes.create_string_buffer(ATTR_BYTES)
    struct.pack_into("<IIIII", attr, 0, spec.type, spec.key_size, spec.value_size, spec.max_entries,
                     spec.flags)
    struct.pack_into("16s", attr, 28, spec.name.encode()[:OBJ_NAME_LEN - 1])
    try:
        return _bpf(BPF_MAP_CREATE, attr)
    except PermissionError as exc:
        raise LoadError(f"cannot create map {spec.name}: {exc.strerror} (before Linux 5.11 maps count "
                        "against the locked-memory limit: run with 'ulimit -l unlimited')") from exc
    except OSError as exc:
        raise LoadError(f"cannot create map {spec.name}: {exc.strerror}") from exc


def raw_tracepoint_open(prog_fd: int) -> int:
    """bpf(BPF_RAW_TRACEPOINT_OPEN) of a tracing program: the fd that keeps it attached."""
    attr = ctypes.create_string_buffer(ATTR_BYTES)
    struct.pack_into("<QI", attr, 0, 0, prog_fd)  # name (none: the program's own target), prog_fd
    fd = _bpf(BPF_RAW_TRACEPOINT_OPEN, attr)
    os.set_inheritable(fd, False)
    return fd


def load_program(name: str, prog_type: int, attach_type: int, insns: bytes, license: str,
                  attach_btf_id: int = 0) -> int:
    """bpf(BPF_PROG_LOAD); on refusal, once more with the verifier's log for the message.

    `attach_btf_id`: the kernel function a tracing (fentry) program is for, by its vmlinux BTF id.
    """
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license.encode())
    attr = ctypes.create_string_buffer(ATTR_BYTES)
    struct.pack_into("<IIQQ", attr, 0, prog_type, len(insns) // 8,
                     ctypes.addressof(code), ctypes.addressof(lic))
    struct.pack_into("16s", attr, 48, name.encode()[:OBJ_NAME_LEN - 1])
    struct.pack_into("<I", attr, 68, attach_type)
    struct.pack_into("<I", attr, 108, attach_btf_id)
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError as exc:
        log = ctypes.create_string_buffer(LOG_BYTES)
        struct.pack_into("<IIQ", attr, 24, 1, LOG_BYTES, ctypes.addressof(log))
        with contextlib.suppress(OSError):
            os.close(_bpf(BPF_PROG_LOAD, attr))
        tail = " | ".join(log.value.decode(errors="replace").strip().splitlines()[-3:])
        raise LoadError(f"the kernel refused program {name}: {exc.strerror}"
                        + (f" (verifier: {tail})" if tail else "")) from exc
