"""The command cannot get around what observes and confines it; each test is the attack.

Run as root through the real CLI: compat syscalls (which no syscall
tracepoint sees) are refused and counted, unless the run allows them and
says so; under a sandbox, io_uring, user namespaces, clone3 and a
`cgroup.procs` write are refused, while threads, subprocesses and forks
keep working; under a network policy the command cannot leave the run's
cgroup, and a process moved out of it from outside is still refused a
denied endpoint.
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from runner.capture.cgroup import parent_name
from runner.host.mounts import cgroup2_mount
from tests.support import CLI, Archive, assay, run_cgroups, run_observed, runner_env, unique_run_id

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
PROGRAMS = Path(__file__).resolve().parent / "programs"
ENOSYS = -errno.ENOSYS

NET_DENY = """\
version = 1
[network]
default = "deny"
allow = [{ cidr = "127.0.0.1", ports = 5353, protocol = "udp" }]
"""


def _printed(proc: subprocess.CompletedProcess[str]) -> dict:
    """The JSON object a test program printed last on stdout."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _command_pid(run_id: str, argv: list[str], timeout: float = 60) -> int:
    """Host pid of the run's process whose command line is `argv`, once it is there (the
    runner's helpers in the cgroup still carry the runner's own command line)."""
    want = b"".join(a.encode() + b"\0" for a in argv)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in run_cgroups(run_id):
            procs = cgroup2_mount() / parent_name() / name / "cgroup.procs"
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    if Path(f"/proc/{pid}/cmdline").read_bytes() == want:
                        return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"no process of run {run_id} runs {argv}")


def test_a_process_moved_out_of_the_run_cgroup_is_still_refused_by_the_network_policy(tmp_path: Path) -> None:
    """The command cannot leave its cgroup under a network policy (below); an accomplice outside
    the run, as root, moves it anyway: its connects are still the run's, by lineage."""
    policy = tmp_path / "policy.toml"
    policy.write_text(NET_DENY)
    run_id = unique_run_id("net-escape")
    command = [PY, "-B", str(PROGRAMS / "policy" / "escape_connect.py")]
    args = ["run", "--out", tmp_path, "--run-id", run_id, "--force", "--workdir", tmp_path,
            "--policy", policy, "--", *command]
    with subprocess.Popen([*CLI, *map(str, args)], cwd=tmp_path, env=runner_env(), text=True,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            pid = _command_pid(run_id, command)
            (cgroup2_mount() / "cgroup.procs").write_text(f"{pid}\n")
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {"moved": "/", "udp_denied": errno.EPERM, "tcp6_denied_in_child": errno.EPERM}
    archive = Archive(tmp_path / f"{run_id}.tar.gz")
    assert archive.values("connect_blocked") == ["127.0.0.2:5354", "[::1]:10"]
    assert archive.values("event_110") == ["/"]  # the move itself is evidence
    assert archive.health["cgroup_correlation"] == "partial"
    assert assay("validate", archive.path).returncode == 0


@pytest.mark.parametrize("abi_max", [None, "1"], ids=["this-kernel", "landlock-abi-1"])
def test_under_a_network_policy_the_command_cannot_leave_its_cgroup(tmp_path: Path, abi_max: str | None,
                                                                   ) -> None:
    """Even where Landlock cannot restrict truncate(2) (a network-only policy needs no ABI 3)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(NET_DENY)  # writes everywhere (no [filesystem]), but denies the network
    env = {**runner_env(), "ASSAY_RUNNER_LANDLOCK_ABI_MAX": abi_max} if abi_max else None
    seen, archive = _escapes(tmp_path, "--policy", str(policy), env=env)
    assert (seen["cgroup_procs_write"], seen["clone3_into_cgroup"]) == (errno.EACCES, errno.ENOSYS)
    assert {k: seen[k] for k in WORKING} == WORKING
    assert archive.values("event_110") == archive.values("event_111") == []


# -- compat syscalls --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compat_open(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/seccomp/compat_open.c, built for this module."""
    cc = shutil.which("cc")
    assert cc, "a C compiler is needed (build-essential)"
    exe = tmp_path_factory.mktemp("compat") / "compat_open"
    subprocess.run([cc, "-O1", "-o", exe, PROGRAMS / "seccomp" / "compat_open.c"], check=True)
    return exe


def _compat_run(tmp_path: Path, exe: Path, *extra: str) -> tuple[dict, Archive, Path, Path]:
    run_id = unique_run_id("compat")
    via_int80, via_x32 = tmp_path / "int80.txt", tmp_path / "x32.txt"
    proc = run_observed(tmp_path, run_id, exe, via_int80, via_x32, workdir=tmp_path, extra=extra)
    assert proc.returncode == 0, proc.stderr
    return _printed(proc), Archive(tmp_path / f"{run_id}.tar.gz"), via_int80, via_x32


def test_compat_syscalls_are_refused_with_enosys_and_counted(tmp_path: Path, compat_open: Path) -> None:
    seen, archive, via_int80, via_x32 = _compat_run(tmp_path, compat_open)
    assert seen == {"i386_open": ENOSYS, "x32_open": ENOSYS}
    assert not via_int80.exists() and not via_x32.exists()
    assert "s3_syscalls_refused: compat_i386=1 compat_x32=1" in archive.health["notes"]
    assert archive.health["cgroup_correlation"] == "clean"  # refused: nothing happened unseen
    assert assay("validate", archive.path).returncode == 0


def test_compat_syscalls_are_refused_under_a_sandbox_first(tmp_path: Path, compat_open: Path) -> None:
    seen, archive, via_int80, _ = _compat_run(tmp_path, compat_open, "--sandbox", "read-only")
    assert seen["i386_open"] == ENOSYS  # not -EACCES: the filter refused it, Landlock never saw it
    assert not via_int80.exists()
    assert "s3_syscalls_refused: compat_i386=1 compat_x32=1" in archive.health["notes"]


def test_allowed_compat_syscalls_run_and_health_says_so(tmp_path: Path, compat_open: Path) -> None:
    seen, archive, via_int80, _ = _compat_run(tmp_path, compat_open, "--allow-compat-syscalls")
    assert seen["i386_open"] >= 0
    assert via_int80.read_text() == "x"
    assert str(via_int80) not in archive.values("openat")  # the blind spot itself
    assert "s2_compat_syscalls: allowed=true traced=false" in archive.health["notes"]
    assert not [n for n in archive.health["notes"] if n.startswith("s3_syscalls_refused")]
    assert archive.health["cgroup_correlation"] == "partial"  # not PASSING
    assert assay("validate", archive.path).returncode == 0


# -- ways out of a sandbox --------------------------------------------------------------------


def _escapes(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[dict, Archive]:
    run_id = unique_run_id("sbx-escape")
    proc = run_observed(tmp_path, run_id, PY, "-B", PROGRAMS / "seccomp" / "escapes.py", str(cgroup2_mount()),
                        workdir=tmp_path, extra=extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return _printed(proc), Archive(tmp_path / f"{run_id}.tar.gz")


WORKING = {"thread": True, "subprocess": 0, "fork": 0}


def test_a_sandbox_refuses_io_uring_user_namespaces_clone3_and_cgroup_procs(tmp_path: Path) -> None:
    seen, archive = _escapes(tmp_path, "--sandbox", "read-only")
    assert seen == {"io_uring_setup": errno.EPERM, "unshare_newuser": errno.EPERM,
                    "clone_newuser": errno.EPERM, "clone3_into_cgroup": errno.ENOSYS,
                    "cgroup_procs_write": errno.EACCES, **WORKING}
    assert "s3_syscalls_refused: io_uring=1 user_namespace=2" in archive.health["notes"]
    assert archive.values("event_110") == archive.values("event_111") == []  # nobody left the cgroup
    assert archive.health["cgroup_correlation"] == "clean"
    assert "/bin/true" in archive.values("exec")
    assert assay("validate", archive.path).returncode == 0


def test_without_a_confining_policy_the_same_calls_go_through(tmp_path: Path) -> None:
    """The control: the probes work, so the refusals above are the sandbox's."""
    seen, archive = _escapes(tmp_path, "--sandbox", "danger-full-access")
    assert seen == {"io_uring_setup": 0, "unshare_newuser": 0, "clone_newuser": 0,
                    "clone3_into_cgroup": 0, "cgroup_procs_write": 0, **WORKING}
    assert not [n for n in archive.health["notes"] if n.startswith("s3_syscalls_refused")]
    assert archive.health["cgroup_correlation"] == "partial"  # the escapes are evidence
