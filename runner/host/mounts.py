"""Where the kernel interfaces the runner needs are mounted: cgroup v2, tracefs, debugfs.

Read from /proc/self/mountinfo rather than assumed, because hybrid hosts put
cgroup v2 below /sys/fs/cgroup/unified and fresh machines may lack tracefs.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.errors import RunnerError

MOUNTINFO = Path("/proc/self/mountinfo")
TRACEFS = Path("/sys/kernel/tracing")
DEBUGFS = Path("/sys/kernel/debug")


@dataclass(frozen=True)
class Mount:
    """One visible mount from mountinfo (later mounts on a path hide earlier ones)."""

    mount_point: Path
    fstype: str
    root: str
    read_only: bool = False


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
        read_only = "ro" in fields[5].split(",") if len(fields) > 5 else False
        mount = Mount(Path(_unescape(fields[4])), tail[0], _unescape(fields[3]), read_only)
        by_point.pop(mount.mount_point, None)  # re-insert: keep mount order
        by_point[mount.mount_point] = mount
    return list(by_point.values())


def is_dir(path: Path) -> bool:
    """is_dir() that says False instead of raising when a non-root user may not look."""
    try:
        return path.is_dir()
    except OSError:
        return False


def mounts() -> list[Mount]:
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


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The last line a failed command printed, for a one-line error."""
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup2_target(mountinfo: str | None = None) -> Path:
    """Where `fix_mounts` puts a missing cgroup v2 mount.

    /sys/fs/cgroup itself when nothing is mounted there; otherwise (a tmpfs
    holding cgroup v1 hierarchies: a hybrid or v1 host, or a docker container
    on one) its `unified` subdirectory, the hybrid layout's place.
    """
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    taken = any(m.mount_point == CGROUP_ROOT for m in parse_mountinfo(text))
    return CGROUP_ROOT / "unified" if taken else CGROUP_ROOT


def _mount(fstype: str, target: Path) -> str:
    """Mount fstype at target; one note saying what happened."""
    proc = subprocess.run(
        ["mount", "-t", fstype, fstype, str(target)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode == 0:
        return f"mounted {fstype} at {target}"
    return f"could not mount {fstype} at {target}: {last_line(proc)}"


def remount_writable(target: Path) -> str:
    """Clear the read-only flag of the mount at target; one note saying what happened."""
    proc = subprocess.run(
        ["mount", "-o", "remount,bind,rw", str(target)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode == 0:
        return f"made the read-only mount at {target} writable"
    return f"could not make {target} writable: {last_line(proc)}"


def fix_mounts() -> Iterator[str]:
    """Mount tracefs, debugfs and cgroup v2 where the runner looks, when missing.

    A fresh container lacks all three (docker mounts only cgroup v1 under a
    hybrid host); with CAP_SYS_ADMIN it may mount them itself. A cgroup v2
    mount shows the whole hierarchy only in the host's cgroup namespace,
    which `check_hostns` requires.
    """
    visible = mounts()
    mounted = {m.mount_point for m in visible}
    for fstype, target in (("tracefs", TRACEFS), ("debugfs", DEBUGFS)):
        if target not in mounted:
            yield _mount(fstype, target)
    if not any(m.fstype == "cgroup2" for m in visible):
        target = cgroup2_target()
        try:
            target.mkdir(exist_ok=True)
        except OSError as exc:
            yield f"could not create {target}: {exc.strerror}"
            return
        yield _mount("cgroup2", target)
