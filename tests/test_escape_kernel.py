"""Leaving the run's cgroup hides nothing: the escape attacks.

Each test is the attack: the command moves itself (or starts a child) out of
the run's cgroup, then reads and writes. The later reads and writes must be
in the kernel layer (lineage tracking), the move must be evidence, and health
must not say `clean`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.host.mounts import cgroup2_mount
from tests.support import Archive, assay, run_observed

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
PROGRAMS = Path(__file__).resolve().parent / "programs"


def _opened(archive: Archive, path: str, access: str) -> list[dict]:
    return [e for e in archive.kernel
            if e["kind"] == "openat" and e["value"] == path and e.get("access_mode") == access]


def _assert_escape_evidence(archive: Archive, kind: str, value: str | None) -> None:
    assert [e["value"] for e in archive.kernel if e["kind"] == kind] == [value]
    health = archive.health
    assert health["cgroup_correlation"] == "partial"
    assert any(n.startswith("s3_cgroup_escape: ") for n in health["notes"]), health["notes"]
    assert assay("validate", archive.path).returncode == 0


def test_cgroup_procs_escape_is_followed_and_recorded(tmp_path: Path) -> None:
    root = cgroup2_mount()
    out = tmp_path / "out.txt"
    script = f"echo $$ > {root}/cgroup.procs; cat /etc/passwd > /dev/null; echo x > {out}"
    proc = run_observed(tmp_path, "escape-procs", "/bin/sh", "-c", script, workdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "escape-procs.tar.gz")
    assert _opened(archive, "/etc/passwd", "read")
    assert _opened(archive, str(out), "write")
    assert "/usr/bin/cat" in archive.values("exec")
    _assert_escape_evidence(archive, "event_110", "/")


def test_clone_into_cgroup_escape_is_followed_and_recorded(tmp_path: Path) -> None:
    root = cgroup2_mount()
    out = tmp_path / "leak.bin"
    proc = run_observed(tmp_path, "escape-clone3", PY, PROGRAMS / "clone_into_cgroup.py",
                        str(root), "/etc/shadow", str(out), workdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "escape-clone3.tar.gz")
    assert _opened(archive, "/etc/shadow", "read")
    assert _opened(archive, str(out), "write")
    _assert_escape_evidence(archive, "event_111", None)


def test_a_run_without_escape_stays_clean(tmp_path: Path) -> None:
    """The control: the same reads without a move leave correlation clean and no escape line."""
    proc = run_observed(tmp_path, "no-escape", "/bin/sh", "-c", "cat /etc/passwd > /dev/null",
                        workdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "no-escape.tar.gz")
    assert _opened(archive, "/etc/passwd", "read")
    assert archive.health["cgroup_correlation"] == "clean"
    assert not [e for e in archive.kernel if e["kind"] in ("event_110", "event_111")]
