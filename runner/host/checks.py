"""What a run needs from the machine, checked (and fixed) in one place.

Why one module: `assay-runner run` must stop early with one actionable line
instead of a BCC traceback, `assay-runner doctor` must explain every
prerequisite, and `scripts/setup.sh` (through `doctor --fix`) must repair a
fresh machine. If those three used separate logic they would disagree about
what "ready" means, so they all call the checks and fixes below.

Fixes are generators of one-line notes so the caller can stream what they
are doing (an apt install takes a while).
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ebpf import selftest
from runner.errors import RunnerError
from runner.host.headers import check_headers, fix_headers
from runner.host.mounts import (
    CGROUP2_HOWTO,
    CGROUP2_MISSING,
    DEBUGFS,
    TRACEFS,
    cgroup2_mount,
    cgroup_layout,
    fix_mounts,
    is_dir,
    last_line,
    mounts,
)
from runner.host.result import Check

CAP_SYS_ADMIN = 21
CAP_BPF = 39  # since Linux 5.8; reported, not required (CAP_SYS_ADMIN covers it)
# The inode numbers of the initial namespaces are fixed by the kernel
# (PROC_PID_INIT_INO, PROC_CGROUP_INIT_INO in include/linux/proc_ns.h).
INIT_PID_NS = 0xEFFFFFFC
INIT_CGROUP_NS = 0xEFFFFFFB
CLONE_NEWPID = 0x20000000
# landlock_create_ruleset is 444 on x86_64, aarch64 and every other arch using
# the unified syscall table (all new syscalls since 5.1 share one number).
SYS_LANDLOCK_CREATE_RULESET = 444
LANDLOCK_WRITES_ABI = 3
"""The Landlock ABI that can restrict truncate(2) (Linux 6.2): below it a policy restricting writes
is refused (runner/enforce/landlock.py), never run half-enforced."""
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0

NOT_ROOT = "assay-runner run needs root for eBPF; use sudo, or the daemon"



def _effective_caps() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def check_root() -> Check:
    """eBPF, cgroups, mounts and namespaces need root with CAP_SYS_ADMIN.

    CAP_SYS_ADMIN alone is enough for the BPF side too: the kernel's
    bpf_capable() and perfmon_capable() accept it in place of CAP_BPF and
    CAP_PERFMON. Requiring CAP_BPF as well refused containers that work:
    Debian's docker 20.10 cannot grant CAP_BPF by name, and --privileged
    fails where the host's capability bounding set lacks a capability docker
    asks for, so `--cap-add SYS_ADMIN` is the grant that works everywhere.
    """
    caps = _effective_caps()
    euid = os.geteuid()
    if not caps >> CAP_SYS_ADMIN & 1:
        if euid != 0:
            return Check("root", False, "not running as root", NOT_ROOT)
        return Check(
            "root", False, "running as root without CAP_SYS_ADMIN",
            "give the runner CAP_SYS_ADMIN (docker: --cap-add SYS_ADMIN; docs/setup.md)",
        )
    if caps >> CAP_BPF & 1:
        return Check("root", True, f"euid {euid}, CAP_SYS_ADMIN and CAP_BPF effective")
    return Check("root", True, f"euid {euid}, CAP_SYS_ADMIN effective (it covers BPF without CAP_BPF)")


def _namespace_inode(name: str) -> int:
    return os.stat(f"/proc/self/ns/{name}").st_ino


def check_hostns() -> Check:
    """The runner must share the host's pid and cgroup namespaces.

    BPF programs see the kernel's global view: the pids in every record and
    the doctor probe's filter are host pids, and the run cgroup's filter
    level counts from the root of the whole cgroup v2 hierarchy. In a
    container's own pid or cgroup namespace both come out wrong (the probe
    sees nothing, runs miss or misattribute events), so say it up front.
    """
    wrong = [
        f"{name} ({flag})"
        for name, init, flag in (
            ("pid", INIT_PID_NS, "--pid host"),
            ("cgroup", INIT_CGROUP_NS, "--cgroupns host"),
        )
        if _namespace_inode(name) != init
    ]
    if wrong:
        return Check(
            "hostns", False, f"not in the host's {' and '.join(wrong)} namespace",
            "BPF reports host pids and absolute cgroup levels; run the container "
            "with the flags in brackets (docs/setup.md)",
        )
    return Check("hostns", True, "host pid and cgroup namespaces")


BCC_FIX = ("install Debian's python3-bpfcc and use a venv made from /usr/bin/python3 "
           "with --system-site-packages ('make setup' does both)")


def check_bcc() -> Check:
    """BCC is Debian's python3-bpfcc; only a venv that sees it can import it."""
    try:
        found = selftest.bcc_found()
    except Exception as exc:
        return Check("bcc", False, f"cannot import bcc ({exc})", BCC_FIX)
    return Check("bcc", True, found)


def check_bcc_visible() -> Check:
    """`check_bcc` without the import, for `run`: importing BCC loads libbcc (about 80 ms), which
    a run whose monitor is already compiled never uses (ebpf/bpfobject.py); a BCC that is there
    but broken is reported by the compile that needs it."""
    spec = importlib.util.find_spec("bcc")
    if spec is None or spec.origin is None:
        return Check("bcc", False, "cannot import bcc (no module named 'bcc')", BCC_FIX)
    return Check("bcc", True, f"bcc ({Path(spec.origin).parent})")


def check_tracefs() -> Check:
    """BCC attaches syscall tracepoints through tracefs and reads their layout there."""
    for base in (TRACEFS, DEBUGFS / "tracing"):
        if is_dir(base / "events" / "syscalls"):
            return Check("tracefs", True, f"{base}/events/syscalls")
    if any(m.mount_point == TRACEFS for m in mounts()):
        if not os.access(TRACEFS, os.R_OK | os.X_OK):
            return Check("tracefs", False, f"{TRACEFS} is not readable by uid {os.geteuid()}",
                         "run as root")
        return Check(
            "tracefs", False, f"{TRACEFS} has no syscall tracepoints",
            "the kernel needs CONFIG_FTRACE_SYSCALLS=y",
        )
    return Check(
        "tracefs", False, f"tracefs is not mounted at {TRACEFS}",
        f"run 'sudo assay-runner doctor --fix' or 'mount -t tracefs tracefs {TRACEFS}'",
    )


def check_cgroup2(write_probe: bool = True) -> Check:
    """The run gets its own cgroup v2; the monitor filters on its id."""
    try:
        mount = cgroup2_mount()
    except RunnerError:
        return Check("cgroup2", False, CGROUP2_MISSING, CGROUP2_HOWTO)
    found = f"{mount} ({cgroup_layout()} layout)"
    if not write_probe:
        return Check("cgroup2", True, found)
    probe = mount / f"assay-doctor-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return Check(
            "cgroup2", False, f"{found} is not writable ({exc.strerror})",
            "run as root on the host, or in a container with --cap-add SYS_ADMIN (docs/setup.md)",
        )
    return Check("cgroup2", True, f"{found}, writable")


def check_bpf(timeout: float = 120.0) -> Check:
    """Really compile and load a ring-buffer tracepoint program (BPF unavailable?)."""
    fix = "BPF unavailable: see docs/setup.md (troubleshooting: bpf)"
    code = "from ebpf.selftest import bpf_probe_main; bpf_probe_main()"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL, check=False,
        )
    except subprocess.TimeoutExpired:
        return Check("bpf", False, f"compiling a tiny BPF program took over {timeout:.0f} s", fix)
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return Check("bpf", False, f"cannot load a BPF tracepoint program ({last_line(proc)})",
                     fix)
    if result["records"] < 1:
        return Check("bpf", False, "BPF program loaded but the ring buffer delivered nothing",
                     fix)
    return Check(
        "bpf", True,
        f"ring-buffer tracepoint program compiled, loaded and delivered "
        f"({result['seconds']:.1f} s)",
    )


def check_pidns() -> Check:
    """The agent gets its own pid namespace, so its pids are deterministic."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child: unshare, then check a grandchild really is pid 1
        code = 1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWPID) != 0:
                code = ctypes.get_errno() or 1
            else:
                grandchild = os.fork()
                if grandchild == 0:
                    os._exit(0 if os.getpid() == 1 else 255)
                code = os.waitstatus_to_exitcode(os.waitpid(grandchild, 0)[1])
        finally:
            os._exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code == 0:
        return Check("pidns", True, "unshare(CLONE_NEWPID) works")
    reason = "the first child was not pid 1" if code == 255 else os.strerror(code)
    return Check(
        "pidns", False, f"unshare(CLONE_NEWPID) failed ({reason})",
        "run as root on the host, or in a container with --cap-add SYS_ADMIN (docs/setup.md)",
    )


def landlock_abi() -> int | None:
    """The kernel's Landlock ABI version, or None when Landlock is unavailable."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    return abi if abi > 0 else None


def check_landlock(abi: int | None = None) -> Check:
    """Landlock enforces file policy; runs without a policy do not need it. `abi`: this kernel's
    unless given."""
    abi = abi if abi is not None else landlock_abi()
    if abi is None:
        return Check(
            "landlock", False, "Landlock unavailable",
            "only --policy file rules need it; boot with lsm=...,landlock "
            "(CONFIG_SECURITY_LANDLOCK=y)",
            required=False,
        )
    if abi < LANDLOCK_WRITES_ABI:
        return Check(
            "landlock", False, f"ABI {abi}: a --policy that restricts writes is refused here (Landlock "
            f"ABI {LANDLOCK_WRITES_ABI}, Linux 6.2, restricts truncate(2)); read and network rules work",
            "run policies that restrict writes on Linux 6.2 or later", required=False,
        )
    return Check("landlock", True, f"ABI {abi}", required=False)


def check_hooks() -> Check:
    """Which of the monitor's hooks this kernel has (ebpf/probing.py), against the minimum kernel.

    A syscall the kernel does not have is no loss; one it has but cannot trace is (runs note it as
    `s2_kernel_hooks: lost=...`), so that is a warning, and a kernel below the minimum a failure.
    """
    from ebpf.monitor import MonitorError, hook_plan
    from ebpf.probing import MIN_KERNEL, kernel_version, older_kernels

    release = os.uname().release
    if kernel_version(release) < MIN_KERNEL:
        return Check("hooks", False, f"Linux {release} is older than the monitor needs ({older_kernels()})",
                     "run on a newer kernel")
    try:
        plan = hook_plan()
    except MonitorError as exc:
        return Check("hooks", False, str(exc), "see the tracefs check")
    detail = (f"{len(plan.attached)} tracepoints attached, "
              f"absent-by-kernel: {','.join(plan.absent) or 'none'}, "
              f"lost: {','.join(plan.lost) or 'none'} ({older_kernels()})")
    return Check("hooks", not plan.lost, detail,
                 "runs work, but what goes through the lost syscalls is not observed (health notes it)",
                 required=False)


def check_paths() -> Check:
    """Whether runs name each opened file by the kernel's own path (ebpf/kpaths.py probes it as the
    monitor does); without, paths are the strings the command passed (`path_source=user_memory`)."""
    from ebpf import kpaths

    probe = kpaths.probe()
    if probe.available:
        return Check("paths", True, "path_source=kernel (fentry on security_file_open)", required=False)
    return Check("paths", False, f"path_source=user_memory: {probe.why}",
                 "runs work; paths are the strings the command passed, so a symlink, bind mount or "
                 "racing thread can make a line name another file (a kernel with fentry, BTF and "
                 "bpf_d_path names the file itself)", required=False)


def run_checks() -> list[Check]:
    """Every check doctor reports, in order; BPF only once its inputs pass."""
    checks = [check_root(), check_hostns(), check_bcc(), check_headers(), check_tracefs(),
              check_cgroup2()]
    if all(c.ok for c in checks if c.name != "cgroup2"):
        checks.append(check_bpf())
    else:
        checks.append(Check("bpf", False, "not attempted", "fix the checks above first"))
    tracefs = next(c for c in checks if c.name == "tracefs")
    checks += [check_hooks() if tracefs.ok else Check("hooks", False, "not attempted", "fix tracefs first"),
               check_paths(), check_pidns(), check_landlock()]
    return checks


def require_run_prerequisites() -> None:
    """The cheap checks `run` makes first: raise the first failure as one line.

    No BPF compile here: the run compiles the real monitor right after (or loads it compiled).
    """
    steps: tuple[Callable[[], Check], ...] = (
        check_root, check_hostns, check_bcc_visible, check_headers, check_tracefs,
        lambda: check_cgroup2(write_probe=False),
    )
    for step in steps:
        result = step()
        if not result.ok:
            raise RunnerError(result.message)


def apply_fixes() -> Iterator[str]:
    """Every safe fix, as one note per change (needs root)."""
    yield from fix_mounts()
    yield from fix_headers()
    yield from warm_monitor()


def warm_monitor() -> Iterator[str]:
    """Compile the monitor into the compiled-object cache when it is not there yet, so the first
    run loads it instead of compiling (1.5-3 s; ebpf/bpfobject.py). A host that cannot compile is
    left to the `bcc`, `headers` and `bpf` checks to explain."""
    from ebpf.bpfobject import CompileError, cache_dir
    from ebpf.monitor import MonitorConfig, MonitorError, monitor_object

    folder = cache_dir()
    if folder is None or not all(c().ok for c in (check_bcc, check_headers, check_tracefs)):
        return
    try:
        _, cached = monitor_object(MonitorConfig())
    except (MonitorError, CompileError, OSError):
        return
    if not cached:
        yield f"compiled the eBPF monitor into {folder} (runs load it from there)"
