"""Output side, written as the attacks: the command cannot forge, redirect or
destroy the evidence, and runs as the invoking user under sudo.

Every command here is hostile on purpose. "Sudo-style" runs set SUDO_UID and
SUDO_GID to nobody's ids in the root runner's environment, as `sudo` does:
the command must then run as nobody. pytest's own temp dirs are 0700 root
(nobody cannot even look), so what nobody must reach lives in a fresh 0755
directory in /tmp.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Archive, assay, assay_compat, runner_env

pytestmark = pytest.mark.kernel

NOBODY = 65534
PRIVILEGE_NOTE = "s4_command_privilege: uid=0 unrestricted_writes=true"
SUDO_NOBODY = runner_env(SUDO_UID=str(NOBODY), SUDO_GID=str(NOBODY), SUDO_USER="nobody")


@pytest.fixture
def public() -> Iterator[Path]:
    """A fresh 0755 root-owned directory in /tmp that nobody can reach."""
    base = Path(tempfile.mkdtemp(prefix="assay-intego-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(out: Path, run_id: str, *cmd: str, env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (), workdir: Path | str = "/") -> subprocess.CompletedProcess[str]:
    return assay("run", "--out", out, "--run-id", run_id, *extra, "--workdir", workdir, "--", *cmd,
                 env=env)


def valid(archive: Path) -> None:
    """The project's conformance check (`validate`) and Assay's rules from outside (assay_compat)."""
    proc = assay("validate", archive)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    compat = assay_compat(archive)
    assert compat.returncode == 0, compat.stdout[-3000:]


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def tree(path: Path) -> list[tuple[str, str]]:
    """Every entry beneath `path` (names and link targets or contents): to show nothing changed."""
    out = []
    for p in sorted(path.rglob("*")):
        kind = os.readlink(p) if p.is_symlink() else ("dir" if p.is_dir() else p.read_text())
        out.append((str(p.relative_to(path)), kind))
    return out


# --- who the command runs as -------------------------------------------------

def test_sudo_run_drops_to_the_invoking_user(tmp_path: Path) -> None:
    env = {**SUDO_NOBODY, "HOME": "/root", "USER": "root", "LOGNAME": "root"}  # as sudo leaves them
    proc = run(tmp_path / "out", "sudo", "sh", "-c", 'id -u; id -g; echo "$HOME $USER $LOGNAME"', env=env)
    assert proc.returncode == 0, proc.stderr
    nobody = pwd.getpwuid(NOBODY)
    assert proc.stdout.split() == [str(NOBODY), str(NOBODY), nobody.pw_dir, nobody.pw_name, nobody.pw_name]
    archive = Archive(tmp_path / "out" / "sudo.tar.gz")
    assert "/usr/bin/id" in archive.values("exec")
    assert PRIVILEGE_NOTE not in archive.health["notes"]
    valid(archive.path)


def test_user_root_is_explicit_and_on_the_record(tmp_path: Path) -> None:
    proc = run(tmp_path / "out", "root", "id", "-u", env=SUDO_NOBODY, extra=("--user", "root"))
    assert (proc.returncode, proc.stdout.strip()) == (0, "0"), proc.stderr
    assert "run.evidence_unprotected" in proc.stderr
    assert PRIVILEGE_NOTE in Archive(tmp_path / "out" / "root.tar.gz").health["notes"]


# --- an --out the command could touch is refused, before anything exists ----

def _nobody_owned(public: Path) -> Path:
    d = public / "mine"
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    return d / "runs"


def _under_open_dir(public: Path) -> Path:
    d = public / "open"
    d.mkdir()
    d.chmod(0o777)
    return d / "runs"


def _through_nobody_symlink(public: Path) -> Path:
    safe = public / "safe"
    safe.mkdir()
    d = public / "open"
    d.mkdir()
    d.chmod(0o777)
    (d / "link").symlink_to(safe)
    return d / "link" / "runs"


def _out_itself_writable(public: Path) -> Path:
    d = public / "runs"
    d.mkdir()
    d.chmod(0o777)
    return d


@pytest.mark.parametrize("make", [_nobody_owned, _under_open_dir, _through_nobody_symlink,
                                  _out_itself_writable])
def test_out_the_command_controls_is_refused(public: Path, make) -> None:
    out = make(public)
    before = tree(public)
    proc = run(out, "refused", "true", env=SUDO_NOBODY)
    assert proc.returncode == 125
    line = error_line(proc)
    assert "is not safe from the command" in line and f"uid {NOBODY}" in line
    assert tree(public) == before  # nothing created


def test_root_owned_out_in_a_sticky_dir_is_accepted(public: Path) -> None:
    """The positive control: /tmp-like sticky directories cannot be used against root's entries."""
    sticky = public / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    proc = run(sticky / "runs", "sticky", "true", env=SUDO_NOBODY)
    assert proc.returncode == 0, proc.stderr
    valid(sticky / "runs" / "sticky.tar.gz")


def test_out_in_the_policy_write_trees_is_refused_even_for_root(tmp_path: Path) -> None:
    """workspace-write lets even a root command write the workspace and /tmp (pytest's temp
    dirs included: root may rename them despite the sticky bit); outside those, --out is safe."""
    work = tmp_path / "work"
    work.mkdir()
    for out in (work / "runs", tmp_path / "out"):
        proc = run(out, "ws", "true", extra=("--sandbox", "workspace-write"), workdir=work)
        assert proc.returncode == 125
        assert "is not safe from the command" in error_line(proc)
        assert not out.exists()
    safe = Path(tempfile.mkdtemp(prefix="assay-intego-", dir="/var/tmp"))
    try:
        ok = run(safe / "runs", "ws", "true", extra=("--sandbox", "workspace-write"), workdir=work)
        assert ok.returncode == 0, ok.stderr
        valid(safe / "runs" / "ws.tar.gz")
    finally:
        shutil.rmtree(safe)


# --- the spool symlink plant -------------------------------------------------

def test_planted_spool_symlink_is_never_followed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("original\n")
    (out / "plant.spool.partial").symlink_to(victim)
    proc = run(out, "plant", "true")
    assert proc.returncode == 125
    assert "plant.spool.partial already exists" in error_line(proc)
    assert victim.read_text() == "original\n"
    # --force removes the planted link itself (unlink, not follow) and runs; a link planted
    # at the archive's name is replaced by the rename, never written through
    (out / "plant.tar.gz").symlink_to(victim)
    forced = run(out, "plant", "true", extra=("--force",))
    assert forced.returncode == 0, forced.stderr
    assert victim.read_text() == "original\n"
    assert not (out / "plant.spool.partial").is_symlink()
    assert not (out / "plant.tar.gz").is_symlink()
    valid(out / "plant.tar.gz")


def test_command_cannot_plant_in_out(tmp_path: Path, public: Path) -> None:
    """Sudo-style: the command tries to plant the next run's spool and to forge this archive."""
    out = tmp_path / "out"
    victim = public / "victim.txt"
    victim.write_text("original\n")
    victim.chmod(0o666)
    script = (f"ln -s {victim} {out}/next.spool.partial; "
              f"echo forged > {out}/plant2.tar.gz; echo forged > {out}/plant2.spool.partial; exit 0")
    proc = run(out, "plant2", "sh", "-c", script, env=SUDO_NOBODY)
    assert proc.returncode == 0, proc.stderr
    assert "Permission denied" in proc.stderr
    assert not (out / "next.spool.partial").exists() and not (out / "next.spool.partial").is_symlink()
    assert victim.read_text() == "original\n"
    archive = Archive(out / "plant2.tar.gz")
    tries = {e["value"]: e for e in archive.kernel if e["kind"] == "openat"}
    for name in ("plant2.tar.gz", "plant2.spool.partial"):
        attempt = tries[f"{out}/{name}"]
        assert (attempt["access_mode"], attempt["status"], attempt["return_value"]) == ("write", "error", -13)
    valid(archive.path)


# --- the mid-run spool swap --------------------------------------------------

def test_root_command_swapping_its_spool_gets_no_archive(tmp_path: Path) -> None:
    """A root command (no policy: it can write anywhere) swaps its spool: refused, nothing validates."""
    out = tmp_path / "out"
    harmless = tmp_path / "harmless.spool"
    first = run(tmp_path / "other", "harmless", "true")
    assert first.returncode == 0, first.stderr
    shutil.copy(tmp_path / "other" / "harmless.spool", harmless)
    script = f"mv {out}/swap.spool.partial {out}/moved && cp {harmless} {out}/swap.spool.partial"
    proc = run(out, "swap", "sh", "-c", script)
    assert proc.returncode == 125
    assert "evidence tampered with" in proc.stderr and "swap.spool.partial was replaced" in proc.stderr
    assert not (out / "swap.tar.gz").exists()
    assert not (out / "swap.spool").exists()
    assert not (out / "swap.spool.partial").exists()


def test_unprivileged_command_cannot_swap_its_spool(tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = f"mv {out}/swap2.spool.partial /tmp/; cp /dev/null {out}/swap2.spool.partial; exit 0"
    proc = run(out, "swap2", "sh", "-c", script, env=SUDO_NOBODY)
    assert proc.returncode == 0, proc.stderr
    archive = Archive(out / "swap2.tar.gz")
    assert "/usr/bin/mv" in archive.values("exec")  # what it tried is in the evidence it could not touch
    on_spool = [e for e in archive.kernel if e["value"] == f"{out}/swap2.spool.partial"]
    opens = [e for e in on_spool if e["kind"] == "openat"]
    assert opens and {(e["status"], e["return_value"]) for e in opens} == {("error", -13)}
    assert any(e["kind"] != "openat" for e in on_spool)  # the rename attempt (mv) is recorded too
    valid(archive.path)


# --- runs/ replaced by a symlink ---------------------------------------------

def test_out_replaced_by_a_symlink_mid_run_changes_nothing_outside(tmp_path: Path) -> None:
    """A root command moves --out away and puts a symlink in its place: the runner keeps
    writing into the directory it opened; the symlink's target stays empty."""
    out = tmp_path / "runs"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run(out, "moved", "sh", "-c", f"mv {out} {out}.moved && ln -s {elsewhere} {out}")
    assert proc.returncode == 0, proc.stderr
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "runs.moved").iterdir()) == ["moved.spool", "moved.tar.gz"]
    valid(tmp_path / "runs.moved" / "moved.tar.gz")


def test_unprivileged_command_cannot_replace_out(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    stolen = f"/tmp/stolen-{secrets.token_hex(4)}"  # writable by nobody, and no other test's name
    proc = run(out, "keep", "sh", "-c", f"mv {out} {stolen}; ln -s /tmp {out}; exit 0", env=SUDO_NOBODY)
    assert proc.returncode == 0, proc.stderr
    assert out.is_dir() and not out.is_symlink() and not Path(stolen).exists()
    valid(out / "keep.tar.gz")
