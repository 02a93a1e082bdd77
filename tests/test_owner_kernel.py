"""Hostile owner records change nothing: the sweep acts only on what the runner itself recorded.

Two plants, made while a run is live (its command waits for a file): a
forged `trusted.assay_runner.owner` hint on the live run's cgroup, naming a
dead pid and a spool `../atk/victim-run-42.spool` (a root command can write
that attribute: Landlock does not cover xattrs), and a dead-looking cgroup
whose record names the same `../` spool (the record a patient attacker
would need). The next start sweeps: the live run is left alone and then
finishes with its own archive; the dead-looking cgroup goes, but its spool
name is refused; no file appears outside the output directory.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import msgspec
import pytest

from runner.capture.owner import XATTR, Owner, records_dir, write_record
from runner.host.mounts import cgroup2_mount
from tests.faults_support import WAIT_S, Job, job, running
from tests.partial_spools import DATA, partial_of
from tests.support import Archive, assay

pytestmark = pytest.mark.kernel
__all__ = ["job"]
HOSTILE_SPOOL = "../atk/victim-run-42.spool"


def files_outside(root: Path, out: Path) -> set[Path]:
    return {p for p in root.rglob("*") if out not in p.parents and p != out}


def test_forged_owner_hints_and_records_change_nothing(job: Job) -> None:
    run_id = f"victim-{job.token}"
    go = job.tmp / "go"
    victim, programs = running(job, run_id, f"touch $MARK; while [ ! -e {go} ]; do sleep 0.05; done")
    v2 = cgroup2_mount() / job.token
    (live_cg,) = [p for p in v2.iterdir() if p.is_dir()]
    dead = subprocess.Popen(["true"])
    dead.wait()
    st = job.out.stat()
    forged = Owner(pid=dead.pid, start=1, out=str(job.out), out_dev=st.st_dev, out_ino=st.st_ino,
                   spool=HOSTILE_SPOOL, cgroup=str(live_cg))
    os.setxattr(live_cg, XATTR, msgspec.json.encode(forged))
    atk = job.tmp / "atk"
    atk.mkdir()
    partial_of(DATA / "example.spool", atk / "victim-run-42.spool.partial", 0)
    planted_cg = v2 / f"planted-{dead.pid}-{secrets.token_hex(4)}"
    planted_cg.mkdir()
    write_record(records_dir(job.token), planted_cg.stat().st_ino,
                 msgspec.structs.replace(forged, cgroup=str(planted_cg)))
    before = files_outside(job.tmp, job.out)
    atk_before = {p.name: p.read_bytes() for p in atk.iterdir()}

    nxt = job.run(f"next-{job.token}", "/bin/true", out=job.tmp / "out2")
    assert nxt.returncode == 0, nxt.stderr
    assert (f"assay-runner: left the cgroup {live_cg} alone: the owner hint on it disagrees with its record"
            in nxt.stderr), nxt.stderr
    assert f"removed the cgroup {planted_cg} of a runner that died (pid {dead.pid})" in nxt.stderr
    assert (f"refused to rebuild from the spool name {HOSTILE_SPOOL!r}: it is not a run id's spool; "
            "nothing was touched") in nxt.stderr
    assert victim.poll() is None, victim.communicate()
    assert {p.name: p.read_bytes() for p in atk.iterdir()} == atk_before
    assert files_outside(job.tmp, job.out) - before == {p for p in (job.tmp / "out2").rglob("*")} | {
        job.tmp / "out2"}

    go.touch()
    _, err = victim.communicate(timeout=WAIT_S)
    assert victim.returncode == 0, err
    archive = job.out / f"{run_id}.tar.gz"
    assert assay("validate", archive).returncode == 0
    health = Archive(archive).health
    assert not any(n.startswith("s2_run_recovered") for n in health["notes"])
    assert sorted(p.name for p in job.out.iterdir()) == [f"{run_id}.spool", f"{run_id}.tar.gz"]
    job.assert_clean(programs)
