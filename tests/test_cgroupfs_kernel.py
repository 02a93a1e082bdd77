"""Runner side: the command cannot write itself out of the run's cgroup.

Written as the escape: `echo $$ > <cgroup2 root>/cgroup.procs`,
then a read that must still be observed. Unprivileged (the sudo default),
ordinary permissions refuse it; as root under a policy whose write trees
contain the cgroup filesystem (`/sys`), Landlock refuses it, because the
runner never grants write rights on a cgroup mount.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.capture.cgroup import parent_name
from runner.host.mounts import cgroup2_mount
from tests.support import Archive, assay, runner_env

pytestmark = pytest.mark.kernel

NOBODY = "65534"


def escape(out: Path, run_id: str, env: dict[str, str], extra: tuple[str, ...] = ()) -> Archive:
    procs = cgroup2_mount() / "cgroup.procs"
    script = f"echo $$ > {procs}; echo moved=$?; cat /proc/self/cgroup; cat /etc/hostname"
    proc = assay("run", "--out", out, "--run-id", run_id, *extra, "--workdir", "/",
                 "--", "sh", "-c", script, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "moved=" in proc.stdout and "moved=0" not in proc.stdout, proc.stdout
    assert "Permission denied" in proc.stderr
    assert f"/{parent_name()}/" in proc.stdout  # still inside the run's cgroup (v2 line of /proc/self/cgroup)
    archive = Archive(out / f"{run_id}.tar.gz")
    # (the refused open of cgroup.procs itself is /sys: telemetry under the contract's filter table)
    assert "/etc/hostname" in archive.values("openat")  # the later read is still observed
    assert archive.health["cgroup_correlation"] == "clean"
    return archive


def test_unprivileged_command_cannot_leave_the_cgroup(tmp_path: Path) -> None:
    escape(tmp_path / "out", "cg-user", runner_env(SUDO_UID=NOBODY, SUDO_GID=NOBODY))


def test_root_command_under_a_policy_writing_sys_cannot_leave_the_cgroup(tmp_path: Path) -> None:
    policy = tmp_path / "sys.toml"
    policy.write_text('version = 1\n[filesystem]\nread = ["/"]\nwrite = ["/sys", "/dev/null"]\n')
    escape(tmp_path / "out", "cg-root", runner_env(), extra=("--policy", str(policy)))
