"""The monitor compiled once: bytecode and map specs, cached per source, flags and kernel.

`compiled(text, cflags)` returns the `BpfObject` for a C source: from the
cache when this exact source, these flags, this kernel and this BCC were
compiled before, else compiled with BCC (about 1.4 CPU seconds for the
monitor) and then cached. `ebpf/loader.py` loads it without BCC.

What is cached is what BCC's compile produces and nothing else: each
program's instructions with its map references (instruction index -> map
name, the fd BCC patched in is replaced at load), and each map's type,
sizes, flags and BCC's description of its key and value types.

The cache (`CACHE_DIR`, or `$ASSAY_RUNNER_BPF_CACHE`; `off` disables it)
holds code that root loads into the kernel, so it is trusted only when the
directory and the file are root's and nobody else may write them; anything
else (another owner, a bad file) is ignored and compiled again. Files are
written whole (temp file + rename) and the oldest go beyond `CACHE_KEEP`.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import os
import resource
import stat
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec

FORMAT = 1
"""Bumped when what is cached, or how it is loaded, changes: older files are then never read."""
CACHE_DIR = Path("/var/lib/assay-runner/bpf-cache")
CACHE_ENV = "ASSAY_RUNNER_BPF_CACHE"
CACHE_KEEP = 32
"""Objects kept (one per source, flags and kernel: tests use several ring sizes)."""
BPF_LD_IMM64 = 0x18
BPF_PSEUDO_MAP_FD = 1


class MapSpec(msgspec.Struct, frozen=True):
    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    key_desc: str
    leaf_desc: str
    """BCC's JSON description of the key and value C types (ebpf/loader.py `decode_type`)."""


class ProgramSpec(msgspec.Struct, frozen=True):
    name: str
    insns: bytes
    relocs: list[tuple[int, str]]
    """(instruction index, map name) of every 64-bit load of a map fd."""


class BpfObject(msgspec.Struct, frozen=True):
    format: int
    license: str
    maps: list[MapSpec]
    programs: list[ProgramSpec]


class CompileError(RuntimeError):
    """BCC could not compile the source (its message is on stderr, as BCC prints it)."""


def compiled(text: str, cflags: list[str], includes: list[Path]) -> tuple[BpfObject, bool]:
    """The object for `text` compiled with `cflags` (`includes`: the headers it reads), and whether
    it came from the cache."""
    folder = cache_dir()
    path = folder / f"{cache_key(text, cflags, includes)}.bpfo" if folder is not None else None
    if path is not None:
        cached = _read(path)
        if cached is not None:
            return cached, True
    obj = compile_with_bcc(text, cflags)
    if path is not None:
        _write(path, obj)
    return obj, False


def cache_dir() -> Path | None:
    """The cache directory, created root-only if missing; None when disabled or not trustworthy."""
    setting = os.environ.get(CACHE_ENV, "")
    if setting == "off" or os.geteuid() != 0:
        return None
    folder = Path(setting) if setting else CACHE_DIR
    with contextlib.suppress(OSError):  # a host whose runs all use another --out may have no state dir yet
        folder.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
    try:
        return folder if _trusted(os.stat(folder, follow_symlinks=False), stat.S_ISDIR) else None
    except OSError:
        return None


def cache_key(text: str, cflags: list[str], includes: list[Path]) -> str:
    """Everything the bytecode depends on: format, source, headers, flags, kernel build, BCC."""
    h = hashlib.sha256()
    uname = os.uname()
    spec = importlib.util.find_spec("bcc")
    bcc_file = Path(spec.origin) if spec is not None and spec.origin else None
    bcc_id = f"{bcc_file}:{bcc_file.stat().st_mtime_ns}" if bcc_file is not None else "none"
    for part in (str(FORMAT), text, *(p.read_text() for p in includes), "\0".join(cflags),
                 uname.release, uname.version, uname.machine, bcc_id):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _trusted(st: os.stat_result, kind: Callable[[int], bool]) -> bool:
    return kind(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022


def read_trusted(path: Path) -> bytes | None:
    """The bytes of cache file `path` when root owns it and nobody else may write it, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not _trusted(os.fstat(fd), stat.S_ISREG):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def write_whole(path: Path, data: bytes) -> bool:
    """Write cache file `path` whole (temp file + rename), or not at all (False)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.rename(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def _read(path: Path) -> BpfObject | None:
    data = read_trusted(path)
    try:
        obj = msgspec.msgpack.decode(data, type=BpfObject) if data is not None else None
    except msgspec.DecodeError:
        return None
    return obj if obj is not None and obj.format == FORMAT else None


def _write(path: Path, obj: BpfObject) -> None:
    """Write `path` whole, or not at all (a cache that cannot be written only costs the next compile)."""
    if write_whole(path, msgspec.msgpack.encode(obj)):
        _evict(path.parent)


def _evict(folder: Path) -> None:
    with contextlib.suppress(OSError):
        entries = sorted(folder.glob("*.bpfo"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[CACHE_KEEP:]:
            old.unlink(missing_ok=True)


def compile_with_bcc(text: str, cflags: list[str]) -> BpfObject:
    """Compile with BCC and take out what loading needs; BCC's own maps are closed again."""
    try:
        from bcc import BPF, lib  # Debian python3-bpfcc
    except ImportError as exc:
        raise CompileError(f"cannot import bcc ({exc}); install Debian's python3-bpfcc "
                           "('make setup')") from exc

    class CompileOnly(BPF):
        def _trace_autoload(self) -> None:
            """Nothing: loading and attaching are ebpf/loader.py's."""

    _declare(lib)
    # BCC creates its maps to compile, and where the kernel refuses one (before 5.11: the
    # locked-memory limit) it lifts RLIMIT_MEMLOCK to unlimited for good; the command forked
    # later would inherit that. Only ebpf/loader.py lifts it, and keeps what to give back.
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    try:
        bpf = CompileOnly(text=text.encode(), cflags=cflags)
    except Exception as exc:
        raise CompileError(str(exc)) from exc
    finally:
        if resource.getrlimit(resource.RLIMIT_MEMLOCK) != memlock:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, memlock)
    try:
        module = bpf.module
        maps: list[MapSpec] = []
        by_fd: dict[int, str] = {}
        for i in range(lib.bpf_num_tables(module)):
            name = lib.bpf_table_name(module, i)
            by_fd[lib.bpf_table_fd_id(module, i)] = name.decode()
            maps.append(MapSpec(
                name=name.decode(), type=lib.bpf_table_type_id(module, i),
                key_size=lib.bpf_table_key_size_id(module, i),
                value_size=lib.bpf_table_leaf_size_id(module, i),
                max_entries=lib.bpf_table_max_entries_id(module, i), flags=lib.bpf_table_flags_id(module, i),
                key_desc=lib.bpf_table_key_desc(module, name).decode(),
                leaf_desc=lib.bpf_table_leaf_desc(module, name).decode()))
        programs = []
        for i in range(lib.bpf_num_functions(module)):
            name = lib.bpf_function_name(module, i)
            programs.append(_program(name.decode(), bpf.dump_func(name), by_fd))
        return BpfObject(format=FORMAT, license=lib.bpf_module_license(module).decode(),
                         maps=maps, programs=programs)
    finally:
        bpf.cleanup()


def _program(name: str, insns: bytes, by_fd: dict[int, str]) -> ProgramSpec:
    """A program with each map fd BCC patched in turned back into the map's name."""
    relocs = []
    index = 0
    while index < len(insns) // 8:
        code, regs, _off, imm = struct.unpack_from("<BBhi", insns, index * 8)
        if code == BPF_LD_IMM64:
            if regs >> 4 == BPF_PSEUDO_MAP_FD:
                if imm not in by_fd:
                    raise CompileError(f"program {name} loads fd {imm}, which is none of its maps")
                relocs.append((index, by_fd[imm]))
            elif regs >> 4:
                raise CompileError(f"program {name}: unsupported 64-bit load kind {regs >> 4}")
            index += 2  # the second half of the 16-byte instruction
            continue
        index += 1
    return ProgramSpec(name=name, insns=insns, relocs=relocs)


def _declare(lib: ctypes.CDLL) -> None:
    """Prototypes BCC's Python leaves undeclared (so ctypes would truncate or misread them)."""
    vp, ull = ctypes.c_void_p, ctypes.c_ulonglong
    lib.bpf_num_tables.restype, lib.bpf_num_tables.argtypes = ull, [vp]
    lib.bpf_table_name.restype, lib.bpf_table_name.argtypes = ctypes.c_char_p, [vp, ull]
    for name in ("bpf_table_fd_id", "bpf_table_key_size_id", "bpf_table_leaf_size_id"):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_int, [vp, ull]
    lib.bpf_module_license.restype, lib.bpf_module_license.argtypes = ctypes.c_char_p, [vp]
