"""Under a sandbox the command cannot get around the enforcement; under a policy, leaving helps not.

Each test is the attack, run as root through the real CLI: a process of the
run leaves the run's cgroup and reaches for a denied endpoint.
"""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest
from support import Archive, assay, run_observed, unique_run_id

from runner.host.mounts import cgroup2_mount

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
PROGRAMS = Path(__file__).resolve().parent / "programs"

NET_DENY = """\
version = 1
[network]
default = "deny"
allow = [{ cidr = "127.0.0.1", ports = 5353, protocol = "udp" }]
"""


def _printed(proc: subprocess.CompletedProcess[str]) -> dict:
    """The JSON object a test program printed last on stdout."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_process_that_left_the_run_cgroup_is_still_refused_by_the_network_policy(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(NET_DENY)
    run_id = unique_run_id("net-escape")
    proc = run_observed(tmp_path, run_id, PY, "-B", PROGRAMS / "policy" / "escape_connect.py",
                        str(cgroup2_mount()), workdir=tmp_path, extra=("--policy", str(policy)))
    assert proc.returncode == 0, proc.stderr
    seen = _printed(proc)
    assert seen == {"moved": "/", "udp_denied": errno.EPERM, "tcp6_denied_in_child": errno.EPERM}
    archive = Archive(tmp_path / f"{run_id}.tar.gz")
    assert archive.values("connect_blocked") == ["127.0.0.2:5354", "[::1]:10"]
    assert archive.values("event_110") == ["/"]  # the move itself is evidence, as without a policy
    assert archive.health["cgroup_correlation"] == "partial"
    assert assay("validate", archive.path).returncode == 0
