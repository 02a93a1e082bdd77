"""Faults against the real kernel: signals, a killed runner, a full disk, resource limits.

Each test then checks what the run left on the machine, and only what is
the run's: no process carrying the test's token in its environment, no run
cgroup in the test's own cgroup parent (`ASSAY_RUNNER_CGROUP_PARENT`, so a
concurrent test's runs, and its runners that died, are never seen or
swept), and no BPF program the runner held (its ids read from the runner's
own /proc fdinfo while the command ran, looked up with `bpftool` after).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from normalizer.build import normalize
from runner.capture.phases import HOLD_ENV
from runner.evidence.publish import publish
from spool.format import iter_frames, read_spool
from tests.faults_support import WAIT_S, Job, job, program_ids, running, spooled_records, wait_for
from tests.support import CLI, Archive, assay

pytestmark = pytest.mark.kernel
__all__ = ["job"]  # the fixture, imported
DATA = Path(__file__).parent / "data"
# --- 1. interruption ------------------------------------------------------------------------------

@pytest.mark.parametrize(("how", "signum"), [("pid", signal.SIGINT), ("group", signal.SIGINT),
                                             ("pid", signal.SIGTERM), ("pid", signal.SIGHUP)])
def test_a_signal_ends_the_whole_tree_and_the_archive_says_so(job: Job, how: str, signum: int) -> None:
    run_id = f"sig-{signum}-{how}-{job.token}"
    runner, programs = running(job, run_id, "sleep 300 & sleep 300 & touch $MARK; wait")
    (os.killpg if how == "group" else os.kill)(runner.pid, signum)
    _, err = runner.communicate(timeout=WAIT_S)
    assert runner.returncode == 128 + signum, err
    archive = job.out / f"{run_id}.tar.gz"
    assert assay("validate", archive).returncode == 0
    notes = Archive(archive).health["notes"]
    assert f"s2_run_ended: reason={signal.Signals(signum).name.lower()} phase=command" in notes
    assert not list(job.out.glob("*.partial")) and not list(job.out.glob(".*.tmp"))
    job.assert_clean(programs)


def test_a_signal_during_setup_undoes_it_and_writes_nothing(job: Job) -> None:
    run_id = f"setup-{job.token}"
    runner = job.start(run_id, "/bin/sh", "-c", "touch never-started")
    deadline = time.monotonic() + WAIT_S
    while not job.run_cgroups():  # the cgroup exists: set-up is under way (the BPF compile follows)
        assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
        time.sleep(0.01)
    runner.send_signal(signal.SIGTERM)
    programs: set[int] = set()
    while runner.poll() is None:  # whatever the monitor loads before set-up stops, seen from outside
        with contextlib.suppress(OSError):
            programs |= program_ids(runner.pid)
        time.sleep(0.01)
    _, err = runner.communicate(timeout=WAIT_S)
    assert runner.returncode == 143, err
    assert "interrupted by SIGTERM during setup: the command never started" in err
    assert "Traceback" not in err
    assert not (job.tmp / "never-started").exists()
    assert not job.out.exists()  # made by this run, so removed with everything else
    job.assert_clean(programs)


BUSY = "for _ in range(150_000):\n    open('/etc/hostname').close()\n"
"""About 300,000 records: normalizing them takes long enough to signal the runner meanwhile."""


def test_signals_while_the_archive_is_written_never_leave_half_an_archive(job: Job) -> None:
    run_id = f"pub-{job.token}"
    err_path = job.tmp / "stderr"
    with err_path.open("w") as err_file:
        runner = subprocess.Popen(
            [*CLI, "run", "--direct", "--out", str(job.out), "--run-id", run_id, "--",
             "/usr/bin/python3", "-c", BUSY],
            env=job.env, cwd=job.tmp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
            start_new_session=True)
        spool = job.out / f"{run_id}.spool"
        wait_for(spool, runner)  # complete: the command has exited, publication is under way
        while runner.poll() is None and "finishing its archive" not in err_path.read_text():
            runner.send_signal(signal.SIGTERM)  # the first: acknowledged, the archive goes on
            time.sleep(0.3)
        runner.send_signal(signal.SIGINT)  # the second: abandons it, unless it is already written
        runner.wait(timeout=WAIT_S)
    err = err_path.read_text()
    archive = job.out / f"{run_id}.tar.gz"
    assert "Traceback" not in err
    assert not list(job.out.glob(".*.tmp")), "a temp file of the archive was left behind"
    if runner.returncode == 130:  # abandoned: nothing half-written, the spool kept for normalize
        assert "interrupted by SIGINT during publish: the archive was abandoned" in err
        assert not archive.exists()
        assert read_spool(spool).trailer.ended_by is None  # the capture itself was complete
    else:  # written before the second signal came: whole, and the command's own exit code
        assert runner.returncode == 0, err
        assert assay("validate", archive).returncode == 0
        assert not any(n.startswith("s2_run_ended") for n in Archive(archive).health["notes"])
    job.assert_clean()


# --- 2. runner death ------------------------------------------------------------------------------

def kill_and_start_next(job: Job, run_id: str, runner: subprocess.Popen[str]) -> tuple[list[str], str]:
    """SIGKILL the runner, then the next start, which must remove the dead run's cgroups: the lines it
    reported (`assay-runner: ...`), and its whole stderr for the failure message."""
    cgroups = job.run_cgroups()
    assert cgroups
    runner.kill()
    runner.communicate(timeout=WAIT_S)
    assert (job.out / f"{run_id}.spool.partial").exists() and not (job.out / f"{run_id}.tar.gz").exists()
    nxt = job.run(f"next-{job.token}", "/bin/true", out=job.tmp / "out2")
    assert nxt.returncode == 0, nxt.stderr
    reported = [line for line in nxt.stderr.splitlines() if line.startswith("assay-runner: ")]
    for cg in cgroups:  # v2 run cgroup and the v1 pids limit group
        assert any(f"removed the cgroup {cg} of a runner that died (pid {runner.pid})" in r
                   for r in reported), nxt.stderr
    return reported, nxt.stderr


def test_a_killed_runner_is_cleaned_up_and_its_spool_rebuilt_by_the_next_start(job: Job) -> None:
    run_id = f"dead-{job.token}"
    last = job.tmp / f"last-{job.token}"
    runner, programs = running(job, run_id, f"sleep 300 & cat /etc/hostname > {last}; touch $MARK; wait")
    partial = job.out / f"{run_id}.spool.partial"
    deadline = time.monotonic() + WAIT_S
    while last.name.encode() not in spooled_records(partial):  # drained to the file, the run still going
        assert runner.poll() is None, runner.communicate()
        assert time.monotonic() < deadline, "the open of the last file never reached the partial spool"
        time.sleep(0.02)
    reported, stderr = kill_and_start_next(job, run_id, runner)
    archive = job.out / f"{run_id}.tar.gz"
    rebuilt = f"rebuilt {archive} from the dead run's spool"
    assert any(rebuilt in r and "s2_run_recovered" in r for r in reported), stderr
    assert assay("validate", archive).returncode == 0
    recovered = Archive(archive)
    assert recovered.health["cgroup_correlation"] == "partial"
    assert any(n.startswith("s2_run_recovered: cause=runner_died") for n in recovered.health["notes"])
    assert str(last) in recovered.values("openat")  # what was spooled before the kill is all there
    assert not partial.exists() and (job.out / f"{run_id}.spool").exists()
    job.assert_clean(programs)


def test_a_runner_killed_before_any_record_of_its_command_was_spooled_leaves_nothing_to_rebuild(
        job: Job) -> None:
    """The ring held (a consumer that is not draining, HOLD_ENV): the command runs, but the spool has
    only its header when the runner dies, which a loaded host can also do to a runner between drains."""
    run_id = f"early-{job.token}"
    job.env[HOLD_ENV] = "1"
    runner, programs = running(job, run_id, "sleep 300 & touch $MARK; wait")
    partial = job.out / f"{run_id}.spool.partial"
    assert spooled_records(partial) == b""
    reported, stderr = kill_and_start_next(job, run_id, runner)
    spool = job.out / f"{run_id}.spool"
    said = (f"assay-runner: nothing to rebuild into {job.out / run_id}.tar.gz: the run died before any "
            f"record of its command reached the spool ({spool} is kept, closed)")
    assert said in reported, stderr
    assert not (job.out / f"{run_id}.tar.gz").exists() and not partial.exists()
    assert read_spool(spool).trailer.recovered == "runner_died"
    job.assert_clean(programs)


# --- 3. disk full ---------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 192 KiB tmpfs of the test's own, as --out."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "--lazy", str(mnt)], check=True)


def test_a_full_disk_keeps_the_commands_exit_code_whole_frames_and_the_old_archive(
        job: Job, small_disk: Path) -> None:
    run_id = f"full-{job.token}"
    old = small_disk / f"{run_id}.tar.gz"
    old.write_bytes(b"an archive of an earlier run")
    mark = job.tmp / f"{run_id}.mark"
    script = f"touch {mark}; for i in $(seq 3000); do cat /etc/hostname >/dev/null; done; exit 7"
    runner = job.start(run_id, "/bin/sh", "-c", script, out=small_disk, options=("--force",))
    wait_for(mark, runner)
    programs = program_ids(runner.pid)
    _, err = runner.communicate(timeout=WAIT_S)
    assert runner.returncode == 7, err  # the command ran to its end, and its code is kept
    errors = [line for line in err.splitlines() if line.startswith("assay-runner: error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "Traceback" not in err
    assert "the command exited 7" in errors[0]
    assert old.read_bytes() == b"an archive of an earlier run"  # not replaced
    names = sorted(p.name for p in small_disk.iterdir())
    assert names == [f"{run_id}.spool.partial", f"{run_id}.tar.gz"]  # no temp file, no half spool name
    partial = small_disk / f"{run_id}.spool.partial"
    with partial.open("rb") as f:
        assert len(list(iter_frames(f))) > 1  # whole frames to the end: nothing half-written
    job.assert_clean(programs)

    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)  # room again
    old.unlink()
    rebuilt = assay("normalize", partial)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"closed {partial} as {small_disk / run_id}.spool" in rebuilt.stderr
    notes = Archive(old).health["notes"]
    assert any(n.startswith("s2_run_recovered: cause=incomplete_spool ") for n in notes)


def test_a_full_disk_while_publishing_keeps_the_old_archive_and_no_temp_file(small_disk: Path) -> None:
    """The archive writer itself on a real full filesystem (the run's publication step)."""
    old = small_disk / "r.tar.gz"
    old.write_bytes(b"an archive of an earlier run")
    filler = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)
    with contextlib.suppress(OSError):  # take every free block
        while True:
            os.write(filler, b"\0" * 4096)
    os.close(filler)
    run = normalize(read_spool(DATA / "example.spool"), "r")
    fd = os.open(small_disk, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as caught:
            publish(run, old, fd)
    finally:
        os.close(fd)
    assert caught.value.errno == errno.ENOSPC
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "r.tar.gz"]
    assert old.read_bytes() == b"an archive of an earlier run"


# --- 4. limits ------------------------------------------------------------------------------------

FORKER = """
import os, sys
r, w = os.pipe()
n = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            os.close(w); os.read(r, 1); os._exit(0)
        n += 1
except BlockingIOError:
    pass
print(f"forked {n}")
"""
HOG = "b = [bytearray(1 << 20) for _ in range(1024)]"
OOM_NOTE = re.compile(rf"s3_resource_limits: memory_max={48 << 20} oom_kills=[1-9][0-9]* pids_max=4096")


def test_the_pids_limit_holds_and_is_noted(job: Job) -> None:
    run_id = f"pids-{job.token}"
    proc = job.run(run_id, "/usr/bin/python3", "-c", FORKER, options=("--pids-max", "24"))
    assert proc.returncode == 0, proc.stderr
    forked = int(proc.stdout.split()[-1])
    assert 0 < forked < 24  # the helper, the init and the python itself count too
    archive = job.out / f"{run_id}.tar.gz"
    assert assay("validate", archive).returncode == 0
    assert "s3_resource_limits: pids_max=24 pids_refused=1" in Archive(archive).health["notes"]
    assert "resource limits:   pids_max=24 pids_refused=1" in proc.stderr
    job.assert_clean()


def test_the_memory_limit_holds_and_the_oom_kill_is_noted(job: Job) -> None:
    run_id = f"mem-{job.token}"
    proc = job.run(run_id, "/usr/bin/python3", "-c", HOG, options=("--memory-max", "48M"))
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    archive = job.out / f"{run_id}.tar.gz"
    assert assay("validate", archive).returncode == 0
    note = [n for n in Archive(archive).health["notes"] if n.startswith("s3_resource_limits:")]
    assert len(note) == 1 and OOM_NOTE.fullmatch(note[0]), note  # the command and maybe its helpers
    job.assert_clean()


def test_a_limit_asked_for_must_be_enforceable_and_bad_values_are_refused(job: Job) -> None:
    for options, message in ((("--pids-max", "-1"), "--pids-max must be 0"),
                             (("--memory-max", "lots"), "--memory-max: expected a positive byte count")):
        proc = job.run(f"bad-{job.token}", "/bin/true", options=options)
        assert proc.returncode == 125 and message in proc.stderr, proc.stderr
    assert job.run_cgroups() == []
