"""`assay-runner doctor` and the run prerequisites, on the real machine.

The CLI tests are real: they run as root against the running kernel (BPF
compile and load included). The unprivileged cases drop to uid 65534 in a
forked child, so they need no file access beyond what is already imported.
mountinfo and headers selection are pure unit tests on recorded samples.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from runner.errors import EXIT_RUNNER_ERROR, RunnerError
from runner.host import checks, headers, mounts
from tests.doctor_support import CHECKS

STALE = re.compile(r"cgroup .* of a runner that died|spool|archive")


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner.cli.main", "doctor", *args],
        capture_output=True, text=True, timeout=180, check=False,
    )


@pytest.mark.kernel
def test_doctor_passes_and_prints_every_check() -> None:
    proc = doctor()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[1] for line in lines] == list(CHECKS)
    for line in lines:
        assert line.split()[0] in ("ok", "warn"), line
    assert "delivered" in lines[CHECKS.index("bpf")]


@pytest.mark.kernel
def test_doctor_json_is_machine_readable() -> None:
    proc = doctor("--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True
    assert doc["fixes"] == []
    assert [c["name"] for c in doc["checks"]] == list(CHECKS)
    for check in doc["checks"]:
        assert set(check) == {"name", "status", "ok", "required", "detail", "fix"}
        assert check["status"] == ("ok" if check["ok"] else "warn")
    optional = {"hooks", "paths", "landlock", "limits", "stale", "native"}
    assert {c["name"] for c in doc["checks"] if not c["required"]} == optional


@pytest.mark.kernel
def test_doctor_says_where_paths_come_from() -> None:
    """The kernel's own path where fentry works (the matrix's guests), else user memory (this host)."""
    from ebpf import kpaths

    check = checks.check_paths()
    probe = kpaths.probe()
    assert check.ok == probe.available
    assert check.detail.startswith("path_source=kernel" if probe.available else "path_source=user_memory: ")


@pytest.mark.kernel
def test_doctor_fix_changes_nothing_on_a_ready_machine() -> None:
    proc = doctor("--fix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fixes = [line for line in proc.stdout.splitlines() if line.startswith("fix: ")]
    # cleaning up after a runner that died elsewhere on this shared host is the only change allowed
    assert fixes == ["fix: nothing to change"] or all(STALE.search(f) for f in fixes), fixes


def in_child_as(uid: int, fn: Callable[[], str]) -> str:
    """Run fn() in a forked child as `uid`; return what it reported."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            report = fn()
        except BaseException as exc:
            report = f"{type(exc).__name__}: {exc}"
        os.write(write_end, report.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report = pipe.read()
    os.waitpid(pid, 0)
    return report


@pytest.mark.kernel  # needs root: drops to uid 65534
def test_require_run_prerequisites_as_non_root_says_one_line() -> None:
    def attempt() -> str:
        try:
            checks.require_run_prerequisites()
        except RunnerError as exc:
            return f"{exc.exit_code} {exc}"
        return "no error"

    report = in_child_as(65534, attempt)
    assert report == (
        f"{EXIT_RUNNER_ERROR} not running as root: "
        "assay-runner run needs root for eBPF; use sudo, or the daemon"
    )


@pytest.mark.kernel  # needs root: it is root less capabilities
def test_root_without_capabilities_is_named() -> None:
    code = "from runner.host.checks import check_root; print(check_root().message)"
    proc = subprocess.run(
        ["setpriv", "--bounding-set=-sys_admin,-bpf", "--", sys.executable, "-c", code],
        capture_output=True, text=True, check=True,
    )
    assert proc.stdout.startswith("running as root without CAP_SYS_ADMIN")
    assert "--cap-add SYS_ADMIN" in proc.stdout


@pytest.mark.kernel
def test_cap_sys_admin_without_cap_bpf_passes_and_loads_bpf() -> None:
    """The kernel's bpf_capable() and perfmon_capable() accept CAP_SYS_ADMIN.

    That is what a docker that cannot grant CAP_BPF gives (--cap-add
    SYS_ADMIN): root must pass, and the real probe must load and deliver.
    """
    code = ("from runner.host.checks import check_root, check_bpf\n"
            "print(check_root().message); print(check_bpf().message)")
    proc = subprocess.run(
        ["setpriv", "--bounding-set=-bpf,-perfmon", "--", sys.executable, "-c", code],
        capture_output=True, text=True, check=True, timeout=180,
    )
    root, bpf = proc.stdout.splitlines()
    assert root.endswith("CAP_SYS_ADMIN effective (it covers BPF without CAP_BPF)"), root
    assert bpf.startswith("ring-buffer tracepoint program compiled, loaded and delivered"), bpf


@pytest.mark.kernel  # needs root: unshare needs root
@pytest.mark.parametrize(("unshare", "flag"), [("--pid", "--pid host"),
                                                ("--cgroup", "--cgroupns host")])
def test_own_pid_or_cgroup_namespace_is_named(unshare: str, flag: str) -> None:
    code = "from runner.host.checks import check_hostns; print(check_hostns().message)"
    proc = subprocess.run(
        ["unshare", unshare, "--fork", "--", sys.executable, "-c", code],
        capture_output=True, text=True, check=True,
    )
    assert proc.stdout.startswith("not in the host's"), proc.stdout
    assert f"({flag})" in proc.stdout, proc.stdout


def test_host_namespaces_pass_here() -> None:
    assert checks.check_hostns().message == "host pid and cgroup namespaces"


@pytest.mark.kernel  # needs root: drops to uid 65534
def test_doctor_as_non_root_fails_on_root_first() -> None:
    def attempt() -> str:
        return "\n".join(f"{c.status} {c.name}" for c in checks.run_checks())

    report = in_child_as(65534, attempt).splitlines()
    assert report[0] == "FAIL root"
    assert "FAIL bpf" in report  # not attempted without root


def test_landlock_abi_is_reported() -> None:
    check = checks.check_landlock()
    assert not check.required
    abi = checks.landlock_abi()
    assert check.ok == (abi is not None)
    if abi is not None and abi >= checks.LANDLOCK_WRITES_ABI:
        assert check.detail == f"ABI {abi}"


def test_a_landlock_too_old_for_write_rules_is_a_warning_that_says_so() -> None:
    """Debian 12's 6.1 has ABI 2: doctor must say that policies restricting writes are refused."""
    check = checks.check_landlock(2)
    assert (check.status, check.required) == ("warn", False)
    assert check.detail.startswith("ABI 2: a --policy that restricts writes is refused here")
    assert checks.check_landlock(3).status == "ok"


def test_native_check_says_the_c_pieces_make_setup_built_are_in_use() -> None:
    """`make test` runs after `make setup`, which builds all four (or stops): doctor must see them."""
    from runner.cli.cmd_doctor import check_native

    check = check_native()
    assert (check.status, check.required) == ("ok", False)
    assert check.detail == "ringsink, fastscan, framescan, fastclient built and in use"


def test_native_check_warns_with_what_is_missing_and_the_fix_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.cli import cmd_doctor
    from runner.host import native

    pieces = [native.Piece("ringsink", True, "/x/_ringsink.so"),
              native.Piece("fastscan", False, f"normalizer._fastscan does not import: {native.FIX}"),
              native.Piece("fastclient", False, f"/v/bin/assay-runner is not the C client: {native.FIX}")]
    monkeypatch.setattr(native, "pieces", lambda: pieces)
    check = cmd_doctor.check_native()
    assert (check.status, check.required) == ("warn", False)
    assert check.message == ("normalizer._fastscan does not import; /v/bin/assay-runner is not the C client "
                             f"(the Python fallback is slower): {native.FIX}")


# --- cgroup2_mount on recorded mountinfo ------------------------------------

UNIFIED = """\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
25 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:7 / /sys/kernel/debug rw,nosuid,nodev,noexec,relatime shared:14 - debugfs debugfs rw
"""

HYBRID = """\
23 1 259:1 / / rw,relatime - ext4 /dev/root rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 23 0:13 / /sys/kernel/tracing rw,relatime - tracefs tracefs rw
"""

V1_ONLY = """\
23 1 259:1 / / rw,relatime - ext4 /dev/root rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
"""

# A bind-mounted subtree seen before the real hierarchy, and a path with a
# space (written \\040 by the kernel).
ODD = """\
23 1 259:1 / / rw,relatime - ext4 /dev/root rw
50 23 0:38 /user.slice /srv/my\\040cgroup rw,relatime - cgroup2 cgroup2 rw
51 23 0:38 / /mnt/cg\\040two rw,relatime - cgroup2 cgroup2 rw
"""


def test_cgroup2_mount_unified() -> None:
    assert str(mounts.cgroup2_mount(UNIFIED)) == "/sys/fs/cgroup"
    assert mounts.cgroup_layout(UNIFIED) == "unified"


def test_cgroup2_mount_hybrid() -> None:
    assert str(mounts.cgroup2_mount(HYBRID)) == "/sys/fs/cgroup/unified"
    assert mounts.cgroup_layout(HYBRID) == "hybrid"


def test_cgroup2_mount_none_is_one_line_error() -> None:
    with pytest.raises(RunnerError) as info:
        mounts.cgroup2_mount(V1_ONLY)
    assert str(info.value).startswith("no cgroup v2 mount in /proc/self/mountinfo: mount one")
    assert "\n" not in str(info.value)
    assert info.value.exit_code == EXIT_RUNNER_ERROR


def test_cgroup2_mount_prefers_whole_hierarchy_and_unescapes() -> None:
    assert str(mounts.cgroup2_mount(ODD)) == "/mnt/cg two"


def test_cgroup2_mount_hidden_by_a_later_mount_is_ignored() -> None:
    shadowed = UNIFIED + "60 25 0:60 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    with pytest.raises(RunnerError):
        mounts.cgroup2_mount(shadowed)


def test_cgroup2_target_is_unified_below_a_v1_tmpfs() -> None:
    assert str(mounts.cgroup2_target(V1_ONLY)) == "/sys/fs/cgroup/unified"


def test_cgroup2_target_is_the_root_when_nothing_is_mounted_there() -> None:
    bare = "23 1 259:1 / / rw,relatime - ext4 /dev/root rw\n"
    assert str(mounts.cgroup2_target(bare)) == "/sys/fs/cgroup"


# In a private mount namespace (nothing leaks to the host): unmount tracefs,
# debugfs and cgroup v2, let fix_mounts put them back, and check the result.
_FIX_IN_PRIVATE_NS = """
import subprocess
from runner.host import checks, mounts
for m in reversed(mounts.mounts()):
    if m.fstype in ("tracefs", "debugfs", "cgroup2"):
        subprocess.run(["umount", "-l", str(m.mount_point)], check=True)
print(sorted({m.fstype for m in mounts.mounts()} & {"tracefs", "debugfs", "cgroup2"}))
for note in mounts.fix_mounts():
    print(note)
print(checks.check_tracefs().status, checks.check_cgroup2().status)
"""


@pytest.mark.kernel
def test_fix_mounts_restores_tracefs_debugfs_and_cgroup2() -> None:
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c",
         _FIX_IN_PRIVATE_NS],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "[]"  # all three were gone
    target = mounts.cgroup2_target()  # where it goes on this host's layout
    assert lines[1:] == [
        "mounted tracefs at /sys/kernel/tracing",
        "mounted debugfs at /sys/kernel/debug",
        f"mounted cgroup2 at {target}",
        "ok ok",
    ]


def test_mountinfo_read_only_flag() -> None:
    ro = HYBRID.replace("/sys/fs/cgroup/unified rw,relatime", "/sys/fs/cgroup/unified ro,relatime")
    flags = {str(m.mount_point): m.read_only for m in mounts.parse_mountinfo(ro)}
    assert flags["/sys/fs/cgroup/unified"] is True
    assert flags["/sys/fs/cgroup"] is False


# Bind-remount this host's cgroup v2 read-only in a private mount namespace, as
# docker does in a container, and let the container entrypoint's fix undo it.
_READ_ONLY_CGROUP2 = """
import subprocess
from runner.host import checks, container, mounts
target = mounts.cgroup2_mount()
subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
print(checks.check_cgroup2().status)
for note in container.fix_container_mounts():
    print(note)
print(checks.check_cgroup2().status)
"""


@pytest.mark.kernel
def test_container_fix_makes_a_read_only_cgroup2_writable() -> None:
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c",
         _READ_ONLY_CGROUP2],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    target = mounts.cgroup2_mount()
    assert proc.stdout.splitlines() == [
        "FAIL", f"made the read-only mount at {target} writable", "ok",
    ]


def test_cgroup2_mount_of_this_machine_is_a_cgroup2_directory() -> None:
    mount = mounts.cgroup2_mount()
    assert (mount / "cgroup.controllers").is_file()


# --- headers fallback choice ----------------------------------------------------

# What apt offered on a Debian 12 host running 6.18.44 (no headers package).
APT_BOOKWORM = [
    "amd64", "cloud-amd64", "rt-amd64", "6.12-cloud-amd64",
    "6.1.0-28-amd64", "6.1.0-28-cloud-amd64", "6.1.0-28-common",
    "6.12.111+deb12-amd64", "6.12.111+deb12-cloud-amd64", "6.12.111+deb12-common",
    "6.12.111+deb12-rt-amd64", "6.12.117+deb12-amd64", "6.12.117+deb12-cloud-amd64",
    "6.12.117+deb12-common", "6.12.117+deb12-rt-amd64",
]


def test_choose_headers_newest_below_when_no_same_minor() -> None:
    assert headers.choose_headers("6.18.44-fc-v669", APT_BOOKWORM, "x86_64") == (
        "6.12.117+deb12-cloud-amd64"
    )


def test_choose_headers_prefers_same_major_minor_nearest_patch() -> None:
    got = headers.choose_headers("6.12.112-custom", APT_BOOKWORM, "x86_64")
    assert got == "6.12.111+deb12-cloud-amd64"


def test_choose_headers_plain_flavour_and_abi_numbers() -> None:
    debian_old = ["6.1.0-27-amd64", "6.1.0-28-amd64", "6.1.0-28-rt-amd64", "6.1.0-28-common"]
    assert headers.choose_headers("6.1.99-x", debian_old, "x86_64") == "6.1.0-28-amd64"
    ubuntu = ["6.8.0-45", "6.8.0-45-generic", "6.8.0-47-generic", "6.8.0-47-lowlatency"]
    assert headers.choose_headers("6.8.12-custom", ubuntu, "x86_64") == "6.8.0-47-generic"


def test_choose_headers_oldest_above_and_none() -> None:
    assert headers.choose_headers("5.15.0", APT_BOOKWORM, "x86_64") == "6.1.0-28-cloud-amd64"
    assert headers.choose_headers("6.18.0", APT_BOOKWORM, "aarch64") is None
    assert headers.choose_headers("6.18.0", ["6.12-cloud-amd64", "amd64"], "x86_64") is None


@pytest.mark.kernel
def test_headers_check_names_a_fallback_tree() -> None:
    check = headers.check_headers()
    assert check.ok, check.message
    release = os.uname().release
    build = headers.MODULES / release / "build"
    tree_release = headers._tree_release(build.resolve())
    assert check.detail.startswith("fallback:") == (tree_release not in (None, release))
