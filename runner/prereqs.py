"""What a run needs from the machine, checked (and fixed) in one place.

Why one module: `assay-runner run` must stop early with one actionable line
instead of a BCC traceback, `assay-runner doctor` must explain every
prerequisite, and `scripts/setup.sh` (through `doctor --fix`) must repair a
fresh machine. If those three used separate logic they would disagree about
what "ready" means, so they all call the checks and fixes below.

Each check returns a `Check`; a failing one carries the one-line guidance
that both `doctor` and `run` print. Fixes are generators of one-line notes so
the caller can stream what they are doing (an apt install takes a while).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.errors import RunnerError

MOUNTINFO = Path("/proc/self/mountinfo")
TRACEFS = Path("/sys/kernel/tracing")
DEBUGFS = Path("/sys/kernel/debug")
MODULES = Path("/lib/modules")
USR_SRC = Path("/usr/src")
KHEADERS = Path("/sys/kernel/kheaders.tar.xz")

CAP_SYS_ADMIN = 21
CAP_BPF = 39  # since Linux 5.8; older kernels gate BPF on CAP_SYS_ADMIN alone
CLONE_NEWPID = 0x20000000
# landlock_create_ruleset is 444 on x86_64, aarch64 and every other arch using
# the unified syscall table (all new syscalls since 5.1 share one number).
SYS_LANDLOCK_CREATE_RULESET = 444
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0

NOT_ROOT = "assay-runner run needs root for eBPF; use sudo, or the daemon"


@dataclass(frozen=True)
class Check:
    """One prerequisite: what was found, and what to do when it is missing."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True

    @property
    def status(self) -> str:
        """'ok', 'FAIL' (a required check failed) or 'warn' (an optional one)."""
        if self.ok:
            return "ok"
        return "FAIL" if self.required else "warn"

    @property
    def message(self) -> str:
        """The one line a user reads: the finding, then what to do about it."""
        return f"{self.detail}: {self.fix}" if self.fix and not self.ok else self.detail


# --- mounts ------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    """One visible mount from mountinfo (later mounts on a path hide earlier ones)."""

    mount_point: Path
    fstype: str
    root: str


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The visible mounts in a /proc/PID/mountinfo text, in mount order."""
    by_point: dict[Path, Mount] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        mount = Mount(Path(_unescape(fields[4])), tail[0], _unescape(fields[3]))
        by_point.pop(mount.mount_point, None)  # re-insert: keep mount order
        by_point[mount.mount_point] = mount
    return list(by_point.values())


def _is_dir(path: Path) -> bool:
    """is_dir() that says False instead of raising when a non-root user may not look."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _mounts() -> list[Mount]:
    return parse_mountinfo(MOUNTINFO.read_text())


CGROUP2_MISSING = "no cgroup v2 mount in /proc/self/mountinfo"
CGROUP2_HOWTO = (
    "mount one ('mount -t cgroup2 none /sys/fs/cgroup', or next to cgroup v1 "
    "'mkdir -p /sys/fs/cgroup/unified && mount -t cgroup2 none /sys/fs/cgroup/unified')"
)
_CGROUP2_PLACES = {Path("/sys/fs/cgroup"): 0, Path("/sys/fs/cgroup/unified"): 1}


def cgroup2_mount(mountinfo: str | None = None) -> Path:
    """Where cgroup v2 is mounted: /sys/fs/cgroup (unified) or .../unified (hybrid).

    Read from mountinfo rather than assumed, because hybrid hosts (this one)
    put a tmpfs at /sys/fs/cgroup and cgroup v2 below it. A mount of the
    whole hierarchy (root "/") wins over a bind-mounted subtree.
    """
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    found = [m for m in parse_mountinfo(text) if m.fstype == "cgroup2"]
    if not found:
        raise RunnerError(f"{CGROUP2_MISSING}: {CGROUP2_HOWTO}")
    best = min(
        found,
        key=lambda m: (m.root != "/", _CGROUP2_PLACES.get(m.mount_point, 2),
                       len(m.mount_point.parts)),
    )
    return best.mount_point


def cgroup_layout(mountinfo: str | None = None) -> str:
    """'hybrid' when cgroup v1 hierarchies are mounted next to v2, else 'unified'."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    return "hybrid" if any(m.fstype == "cgroup" for m in parse_mountinfo(text)) else "unified"


# --- kernel headers ----------------------------------------------------------

# Header flavours usable for a kernel that has no headers package of its own,
# best first. The BPF code reads only tracepoint args (BCC reads their layout
# from tracefs at run time) and helpers, never kernel struct fields, so any
# nearby configured tree of the same architecture compiles it correctly.
FLAVOURS = {
    "x86_64": ("cloud-amd64", "amd64", "generic"),
    "aarch64": ("cloud-arm64", "arm64", "generic"),
}
_BASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\+[\w.~]+)?(?:-(\d+))?$")
_RUNNING = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class HeaderRelease:
    """A distro headers release such as '6.12.111+deb12-cloud-amd64'."""

    release: str
    base: str  # the release without its flavour: names the shared -common tree
    version: tuple[int, int, int]
    abi: int
    flavour_rank: int


def parse_header_release(release: str, machine: str) -> HeaderRelease | None:
    """The release if it is a usable flavour for `machine`, else None."""
    for rank, flavour in enumerate(FLAVOURS.get(machine, ())):
        base = release.removesuffix(f"-{flavour}")
        match = _BASE.match(base) if base != release else None
        if match:
            major, minor, patch, abi = match.groups()
            return HeaderRelease(
                release, base, (int(major), int(minor), int(patch)), int(abi or 0), rank
            )
    return None


def choose_headers(running: str, candidates: Iterable[str], machine: str) -> str | None:
    """The candidate release closest to the running kernel.

    Same major.minor first (nearest patch, then newer), else the newest below
    the running version, else the oldest above it; the flavour order breaks ties.
    """
    match = _RUNNING.match(running)
    if not match:
        return None
    run = (int(match[1]), int(match[2]), int(match[3] or 0))

    def rank(h: HeaderRelease) -> tuple[int, tuple[int, ...], int, int]:
        v = h.version
        if v[:2] == run[:2]:
            return (0, (abs(v[2] - run[2]), -v[2]), -h.abi, h.flavour_rank)
        if v < run:
            return (1, tuple(-x for x in v), -h.abi, h.flavour_rank)
        return (2, v, -h.abi, h.flavour_rank)

    parsed = [h for c in candidates if (h := parse_header_release(c, machine))]
    return min(parsed, key=rank).release if parsed else None


def _tree_release(tree: Path) -> str | None:
    """The kernel release a headers tree was built for."""
    stamp = tree / "include" / "config" / "kernel.release"
    if stamp.is_file():
        return stamp.read_text().strip()
    name = tree.name
    return name.removeprefix("linux-headers-") if name.startswith("linux-headers-") else None


def check_headers(release: str | None = None) -> Check:
    """BCC compiles against /lib/modules/RELEASE/build; a fallback tree is fine."""
    release = release or os.uname().release
    build = MODULES / release / "build"
    if _is_dir(build / "include"):
        tree = build.resolve()
        built_for = _tree_release(tree)
        if built_for in (None, release):
            return Check("headers", True, f"{build} -> {tree}")
        return Check(
            "headers", True,
            f"fallback: {build} -> {tree} ({built_for} headers for kernel {release}; "
            "safe: the monitor reads only tracepoint args)",
        )
    if KHEADERS.exists():
        return Check("headers", True, f"the kernel provides its headers ({KHEADERS})")
    if build.is_symlink():
        found = f"{build} points at missing {os.readlink(build)}"
    else:
        found = f"no kernel headers at {build}"
    return Check(
        "headers", False, found,
        f"run 'sudo assay-runner doctor --fix': it installs linux-headers-{release} "
        "or links the closest distro headers (docs/setup.md)",
    )


def _source_tree(h: HeaderRelease) -> Path | None:
    """The shared tree that goes with a flavour tree (Debian: -common)."""
    shipped = MODULES / h.release / "source"  # the headers package's own link
    if shipped.is_dir():
        return shipped.resolve()
    for name in (f"linux-headers-{h.base}-common", f"linux-headers-{h.base}"):
        if (USR_SRC / name / "include").is_dir():
            return USR_SRC / name
    return None


def _replace_link(link: Path, target: Path) -> str | None:
    """Point a symlink at target; never replace a real file or directory."""
    if link.is_symlink():
        if Path(os.readlink(link)) == target:
            return None
        link.unlink()
    elif link.exists():
        return f"left {link} alone: it is not a symlink"
    link.symlink_to(target)
    return f"linked {link} -> {target}"


def link_fallback_headers(release: str, chosen: str, machine: str) -> Iterator[str]:
    """/lib/modules/RELEASE/{build,source} -> the chosen distro headers trees."""
    h = parse_header_release(chosen, machine)
    assert h is not None, chosen
    moddir = MODULES / release
    moddir.mkdir(parents=True, exist_ok=True)
    links = [(moddir / "build", USR_SRC / f"linux-headers-{chosen}")]
    source = _source_tree(h)
    if source is not None:
        links.append((moddir / "source", source))
    for link, target in links:
        note = _replace_link(link, target)
        if note:
            yield note


def installed_header_releases() -> list[str]:
    """Releases of the headers trees installed under /usr/src."""
    if not USR_SRC.is_dir():
        return []
    return sorted(
        p.name.removeprefix("linux-headers-")
        for p in USR_SRC.glob("linux-headers-*")
        if (p / "include").is_dir()
    )


# --- apt -----------------------------------------------------------------------


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(
        list(args), capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
        check=False,
    )


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def apt_header_releases() -> set[str]:
    """Releases of the linux-headers-* packages apt knows (local cache only)."""
    proc = _apt("apt-cache", "search", "--names-only", "^linux-headers-")
    return {
        line.split()[0].removeprefix("linux-headers-")
        for line in proc.stdout.splitlines()
        if line.strip()
    }


def _apt_install(package: str) -> Generator[str, None, bool]:
    """Install one package (refreshing stale lists once); returns whether it worked."""
    yield f"installing {package} with apt-get (can take a minute)"
    cmd = ("apt-get", "install", "-y", "-q", "--no-install-recommends", package)
    proc = _apt(*cmd)
    if proc.returncode != 0:
        _apt("apt-get", "update", "-q")
        proc = _apt(*cmd)
    if proc.returncode != 0:
        yield f"apt-get install {package} failed: {_last_line(proc)}"
        return False
    yield f"installed {package}"
    return True


def _apt_update() -> Iterator[str]:
    yield "refreshing apt package lists (apt-get update)"
    proc = _apt("apt-get", "update", "-q")
    if proc.returncode != 0:
        yield f"apt-get update failed: {_last_line(proc)}"


def fix_headers(release: str | None = None) -> Iterator[str]:
    """Make /lib/modules/RELEASE/build usable, cheapest way first.

    1. the exact `linux-headers-RELEASE` package when apt has it (a stock
       distro kernel); 2. link a distro headers tree already under /usr/src;
    3. otherwise install the closest distro headers package and link it.
    `apt-get update` runs only when there are no package lists yet, or
    before step 3, which downloads anyway and must see the current versions.
    """
    release = release or os.uname().release
    if check_headers(release).ok:
        return
    machine = os.uname().machine
    has_apt = shutil.which("apt-get") is not None
    available = apt_header_releases() if has_apt else set()
    updated = False
    if has_apt and not available:
        yield from _apt_update()
        available, updated = apt_header_releases(), True
    if release in available:
        yield from _apt_install(f"linux-headers-{release}")
        return
    chosen = choose_headers(release, installed_header_releases(), machine)
    if chosen is not None:
        yield f"no headers package for kernel {release}; using the installed {chosen} headers"
        yield from link_fallback_headers(release, chosen, machine)
        return
    if not has_apt:
        yield f"no kernel headers installed and no apt-get: install headers for {release} by hand"
        return
    if not updated:
        yield from _apt_update()
        available = apt_header_releases()
    if release in available:
        yield from _apt_install(f"linux-headers-{release}")
        return
    chosen = choose_headers(release, available, machine)
    if chosen is None:
        yield f"apt offers no linux-headers package for {machine}: install headers by hand"
        return
    yield f"no headers package for kernel {release}; closest distro headers: {chosen}"
    if (yield from _apt_install(f"linux-headers-{chosen}")):
        yield from link_fallback_headers(release, chosen, machine)


# --- checks ------------------------------------------------------------------


def _effective_caps() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def check_root() -> Check:
    """eBPF, cgroups and namespaces need root, or CAP_BPF + CAP_SYS_ADMIN."""
    caps = _effective_caps()
    last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    needed = {"CAP_SYS_ADMIN": CAP_SYS_ADMIN}
    if last_cap >= CAP_BPF:
        needed["CAP_BPF"] = CAP_BPF
    missing = [name for name, bit in needed.items() if not caps >> bit & 1]
    euid = os.geteuid()
    if missing and euid != 0:
        return Check("root", False, "not running as root", NOT_ROOT)
    if missing:
        return Check(
            "root", False, f"running as root without {' and '.join(missing)}",
            "give the runner full privileges (docker: --privileged)",
        )
    return Check("root", True, f"euid {euid}, {' and '.join(needed)} effective")


def check_bcc() -> Check:
    """BCC is Debian's python3-bpfcc; only a venv that sees it can import it."""
    try:
        import bcc  # the import is the check
    except Exception as exc:
        return Check(
            "bcc", False, f"cannot import bcc ({exc})",
            "install Debian's python3-bpfcc and use a venv made from /usr/bin/python3 "
            "with --system-site-packages ('make setup' does both)",
        )
    version = getattr(bcc, "__version__", "?")
    return Check("bcc", True, f"bcc {version} ({Path(bcc.__file__).parent})")


def check_tracefs() -> Check:
    """BCC attaches syscall tracepoints through tracefs and reads their layout there."""
    for base in (TRACEFS, DEBUGFS / "tracing"):
        if _is_dir(base / "events" / "syscalls"):
            return Check("tracefs", True, f"{base}/events/syscalls")
    if any(m.mount_point == TRACEFS for m in _mounts()):
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
            "run as root on the host, or in a container with --privileged",
        )
    return Check("cgroup2", True, f"{found}, writable")


# The BPF features the monitor relies on, in one small program: a syscall
# tracepoint, the ring buffer and the ancestor-cgroup helper.
_BPF_PROBE = r"""
BPF_RINGBUF_OUTPUT(rb, 1);
TRACEPOINT_PROBE(syscalls, sys_enter_getppid)
{
    if ((bpf_get_current_pid_tgid() >> 32) != TGID)
        return 0;
    u64 cgroup = bpf_get_current_ancestor_cgroup_id(1);
    rb.ringbuf_output(&cgroup, sizeof(cgroup), 0);
    return 0;
}
"""


def bpf_probe_main() -> None:
    """Compile, load, trigger and read the probe; print one JSON line.

    Runs in a child process (see `check_bpf`) so a hang or a crash inside
    BCC/LLVM cannot take `doctor` down, and its compiler noise stays captured.
    """
    from bcc import BPF

    start = time.monotonic()
    bpf = BPF(text=_BPF_PROBE.replace("TGID", str(os.getpid())),
              cflags=["-Wno-macro-redefined", "-Wno-ignored-attributes"])
    records: list[int] = []

    def on_record(_ctx: int, _data: int, size: int) -> int:
        records.append(size)
        return 0

    bpf["rb"].open_ring_buffer(on_record)
    os.getppid()
    bpf.ring_buffer_poll(1000)
    bpf.cleanup()
    print(json.dumps({"records": len(records), "seconds": round(time.monotonic() - start, 2)}))


def check_bpf(timeout: float = 120.0) -> Check:
    """Really compile and load a ring-buffer tracepoint program (BPF unavailable?)."""
    fix = "BPF unavailable: see docs/setup.md (troubleshooting: bpf)"
    code = "from runner.prereqs import bpf_probe_main; bpf_probe_main()"
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
        return Check("bpf", False, f"cannot load a BPF tracepoint program ({_last_line(proc)})",
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
        "run as root on the host, or in a container with --privileged",
    )


def landlock_abi() -> int | None:
    """The kernel's Landlock ABI version, or None when Landlock is unavailable."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    return abi if abi > 0 else None


def check_landlock() -> Check:
    """Landlock enforces file policy; runs without a policy do not need it."""
    abi = landlock_abi()
    if abi is None:
        return Check(
            "landlock", False, "Landlock unavailable",
            "only --policy file rules need it; boot with lsm=...,landlock "
            "(CONFIG_SECURITY_LANDLOCK=y)",
            required=False,
        )
    return Check("landlock", True, f"ABI {abi}", required=False)


def run_checks() -> list[Check]:
    """Every check doctor reports, in order; BPF only once its inputs pass."""
    checks = [check_root(), check_bcc(), check_headers(), check_tracefs(), check_cgroup2()]
    if all(c.ok for c in checks[:4]):
        checks.append(check_bpf())
    else:
        checks.append(Check("bpf", False, "not attempted", "fix the checks above first"))
    checks += [check_pidns(), check_landlock()]
    return checks


def require_run_prerequisites() -> None:
    """The cheap checks `run` makes first: raise the first failure as one line.

    No BPF compile here: the run compiles the real monitor right after.
    """
    steps: tuple[Callable[[], Check], ...] = (
        check_root, check_bcc, check_headers, check_tracefs,
        lambda: check_cgroup2(write_probe=False),
    )
    for step in steps:
        result = step()
        if not result.ok:
            raise RunnerError(result.message)


# --- fixes -------------------------------------------------------------------


def fix_mounts() -> Iterator[str]:
    """Mount tracefs and debugfs where BCC looks for them, when missing."""
    mounted = {m.mount_point for m in _mounts()}
    for fstype, target in (("tracefs", TRACEFS), ("debugfs", DEBUGFS)):
        if target in mounted:
            continue
        proc = subprocess.run(
            ["mount", "-t", fstype, fstype, str(target)],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode == 0:
            yield f"mounted {fstype} at {target}"
        else:
            yield f"could not mount {fstype} at {target}: {_last_line(proc)}"


def apply_fixes() -> Iterator[str]:
    """Every safe fix, as one note per change (needs root)."""
    yield from fix_mounts()
    yield from fix_headers()
