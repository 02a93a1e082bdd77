"""Whether this kernel lets the monitor read the kernel's own path of each open: probed, never assumed.

The kernel-path program (ebpf/kpath.c) is a fentry program on
`security_file_open` calling `bpf_d_path`. It needs BTF, fentry (BPF
trampolines) and the kernel's permission to attach there; kernels differ in
each (our Firecracker hosts refuse the load with EPERM; Debian's 6.1 and 6.12
allow it). The probe asks the kernel the way the real program will be asked:
it loads a two-instruction fentry program for `security_file_open` and
attaches it, then closes both. Where that works, the monitor compiles
ebpf/kpath.c in with the struct offsets the kernel's BTF gives
(ebpf/btf.py) and attaches it; where it does not, the program is compiled
out and health says `path_source=user_memory`: paths come from the
syscall's arguments, read from the command's memory, as they always did.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ebpf.bpfobject import cache_dir, read_trusted, write_whole
from ebpf.btf import Btf, BtfError
from ebpf.loader import PROG_TRACING, TRACE_FENTRY, LoadError, load_program, raw_tracepoint_open

FUNCTION = "security_file_open"
PROGRAM = f"kfunc__{FUNCTION}"
"""BCC's name for `KFUNC_PROBE(security_file_open, ...)`."""
KERNEL = "kernel"
USER_MEMORY = "user_memory"
"""`path_source` values: where the paths of the run's opens came from."""
OFFSETS = {
    "FILE_F_PATH": ("file", "f_path"),
    "FILE_F_INODE": ("file", "f_inode"),
    "FILE_F_FLAGS": ("file", "f_flags"),
    "PATH_MNT": ("path", "mnt"),
    "MOUNT_MNT": ("mount", "mnt"),
    "MOUNT_MNT_NS": ("mount", "mnt_ns"),
    "INODE_I_INO": ("inode", "i_ino"),
    "INODE_I_SB": ("inode", "i_sb"),
    "SB_S_DEV": ("super_block", "s_dev"),
    "TASK_NSPROXY": ("task_struct", "nsproxy"),
    "NSPROXY_MNT_NS": ("nsproxy", "mnt_ns"),
    "MNT_NS_INUM": ("mnt_namespace", "ns.inum"),
}
"""ebpf/kpath.c's compile-time offsets: define -> (struct, member), read from the kernel's BTF."""
_TRIVIAL = bytes.fromhex("b700000000000000" "9500000000000000")  # r0 = 0; exit
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_facts = msgspec.json.Decoder(tuple[int, tuple[str, ...]])


@dataclass(frozen=True)
class KernelPaths:
    """What the probe found: where paths come from, and how to build and attach the program."""

    source: str
    """KERNEL or USER_MEMORY."""
    why: str
    """Why not (the kernel's refusal), empty when available."""
    btf_id: int = 0
    cflags: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        return self.source == KERNEL


def probe() -> KernelPaths:
    """Load and attach a do-nothing fentry program on security_file_open; KERNEL when both work."""
    try:
        btf_id, cflags = kernel_facts()
    except BtfError as exc:
        return KernelPaths(USER_MEMORY, str(exc))
    try:
        prog = load_program("assay_probe", PROG_TRACING, TRACE_FENTRY, _TRIVIAL, "GPL", btf_id)
    except (LoadError, OSError) as exc:
        return KernelPaths(USER_MEMORY, f"fentry on {FUNCTION}: {exc}")
    try:
        link = raw_tracepoint_open(prog)
    except OSError as exc:
        return KernelPaths(USER_MEMORY, f"fentry on {FUNCTION} cannot attach: {exc.strerror}")
    finally:
        os.close(prog)
    with contextlib.suppress(OSError):
        os.close(link)
    return KernelPaths(KERNEL, "", btf_id, ("-DKERNEL_PATHS", *cflags))


def kernel_facts() -> tuple[int, tuple[str, ...]]:
    """(BTF id of FUNCTION, the `-D` offset flags) of the running kernel.

    Reading them parses the kernel's whole BTF (about 0.35 s of Python for 5 MB), and they
    cannot change until the next boot, so they are kept in the compiled-object cache
    (ebpf/bpfobject.py, trusted only as root's), named by the boot id: every later run of
    this boot reads a few hundred bytes instead.
    """
    folder = cache_dir()
    try:
        boot = BOOT_ID.read_text().strip()
    except OSError:
        boot = ""
    path = folder / f"kpaths-{boot}.json" if folder is not None and boot else None
    data = read_trusted(path) if path is not None else None
    if data is not None:
        with contextlib.suppress(msgspec.DecodeError):
            cached = _facts.decode(data)
            if [flag.partition("=")[0] for flag in cached[1]] == [f"-D{name}" for name in OFFSETS]:
                return cached  # else written by a runner that read other offsets: read them again
    btf = Btf.kernel()
    facts = (btf.func_id(FUNCTION), tuple(f"-D{name}={btf.offset(s, m)}" for name, (s, m) in OFFSETS.items()))
    if path is not None and write_whole(path, msgspec.json.encode(facts)):
        for old in path.parent.glob("kpaths-*.json"):  # earlier boots'
            if old != path:
                old.unlink(missing_ok=True)
    return facts
