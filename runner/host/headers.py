"""Kernel headers for BCC: check them, and on a kernel without a headers package, link the nearest.

The BPF code reads only tracepoint args (BCC reads their layout from tracefs
at run time) and helpers, never kernel struct fields, so a nearby configured
tree of the same architecture compiles it correctly (docs/setup.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.host.mounts import is_dir, last_line
from runner.host.result import Check

MODULES = Path("/lib/modules")
USR_SRC = Path("/usr/src")
KHEADERS = Path("/sys/kernel/kheaders.tar.xz")

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
    if is_dir(build / "include"):
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
        yield f"apt-get install {package} failed: {last_line(proc)}"
        return False
    yield f"installed {package}"
    return True


def _apt_update() -> Iterator[str]:
    yield "refreshing apt package lists (apt-get update)"
    proc = _apt("apt-get", "update", "-q")
    if proc.returncode != 0:
        yield f"apt-get update failed: {last_line(proc)}"


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
