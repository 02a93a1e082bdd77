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
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from normalizer.build import normalize
from runner.capture.cgroup import PARENT_ENV, RunCgroup
from runner.capture.limits import V1_FILES, v1_mount
from runner.capture.owner import records_dir
from runner.capture.phases import HOLD_ENV
from runner.evidence.publish import publish
from runner.host.mounts import cgroup2_mount
from spool.format import Batch, SpoolError, iter_frames, read_spool
from tests.support import CLI, Archive, assay, runner_env

pytestmark = pytest.mark.kernel
DATA = Path(__file__).parent / "data"
WAIT_S = 180
"""Upper bound for the runner's set-up on a shared machine (a BCC compile); never a timed assertion."""


class Job:
    """One test's runs: its token, its cgroup parent, the leftovers it checks."""

    def __init__(self, tmp_path: Path) -> None:
        self.token = f"faults-{secrets.token_hex(6)}"
        self.tmp = tmp_path
        self.env = runner_env(**{PARENT_ENV: self.token, "FAULTS_TOKEN": self.token})
        self.out = tmp_path / "out"

    def parents(self) -> list[Path]:
        mounts = [cgroup2_mount(), *(m for m in (v1_mount(n) for n in V1_FILES) if m is not None)]
        return [m / self.token for m in mounts]

    def start(self, run_id: str, *cmd: str | Path, out: Path | None = None,
              options: tuple[str, ...] = ()) -> subprocess.Popen[str]:
        """The runner in its own session (so a group signal reaches only it and its command)."""
        return subprocess.Popen(
            [*CLI, "run", "--direct", "--out", str(out or self.out), "--run-id", run_id, *options, "--",
             *map(str, cmd)],
            env=self.env, cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)

    def run(self, run_id: str, *cmd: str | Path, out: Path | None = None,
            options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        runner = self.start(run_id, *cmd, out=out, options=options)
        stdout, stderr = runner.communicate(timeout=WAIT_S)
        return subprocess.CompletedProcess(runner.args, runner.returncode, stdout, stderr)

    def run_cgroups(self) -> list[Path]:
        return [p for parent in self.parents() if parent.is_dir() for p in parent.iterdir() if p.is_dir()]

    def processes(self) -> list[int]:
        """Live processes whose environment carries the token (the runner's, its command's)."""
        found = []
        needle = f"FAULTS_TOKEN={self.token}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle in (entry / "environ").read_bytes() and _state(int(entry.name)) != "Z":
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def assert_clean(self, programs: set[int] | None = None) -> None:
        """Nothing of the test's runs is left: processes, run cgroups, BPF programs (after their release)."""
        programs = programs or set()
        deadline = time.monotonic() + WAIT_S
        while (self.processes() or attached(programs)) and time.monotonic() < deadline:
            time.sleep(0.2)  # the monitor's background release takes about 1.5 s
        assert self.processes() == []
        assert attached(programs) == set()
        assert self.run_cgroups() == []
        records = records_dir(self.token, create=False)
        assert not records.exists() or list(records.iterdir()) == [], "a run left its owner record"

    def cleanup(self) -> None:
        """The test's own cgroup parents (empty once assert_clean passed)."""
        for parent in self.parents():
            if parent.is_dir():
                parent.rmdir()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    j = Job(tmp_path)
    try:
        yield j
    finally:
        for pid in j.processes():  # a failed test must not leave its command running
            os.kill(pid, signal.SIGKILL)
        for cg in j.run_cgroups():
            RunCgroup(path=cg, id=0, level=0).remove()
        shutil.rmtree(records_dir(j.token, create=False), ignore_errors=True)  # a failed test's records
        j.cleanup()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def bpftool() -> str:
    path = shutil.which("bpftool")
    if path is None:
        pytest.fail("bpftool is missing: 'make setup' installs it (apt package bpftool)")
    return path


def attached(ids: set[int]) -> set[int]:
    """Which of the program ids still exist in the kernel."""
    if not ids:
        return set()
    proc = subprocess.run([bpftool(), "--json", "prog", "show"], capture_output=True, text=True, check=True)
    return ids & {p["id"] for p in json.loads(proc.stdout)}


def program_ids(pid: int) -> set[int]:
    """The BPF programs process `pid` holds open (fdinfo of its bpf-prog fds)."""
    ids = set()
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = info.read_text()
        except OSError:
            continue
        ids |= {int(line.split()[1]) for line in text.splitlines() if line.startswith("prog_id:")}
    return ids


def wait_for(path: Path, runner: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """Until `path` exists (the command reached that point); the runner must still be running."""
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert runner.poll() is None, runner.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def running(job: Job, run_id: str, script: str) -> tuple[subprocess.Popen[str], set[int]]:
    """Start `script` under the runner and wait until it has touched $MARK; the runner's programs."""
    mark = job.tmp / f"{run_id}.mark"
    runner = job.start(run_id, "/bin/sh", "-c", script.replace("$MARK", str(mark)))
    wait_for(mark, runner)
    programs = program_ids(runner.pid)
    assert programs, "the runner holds no BPF program while the command runs"
    return runner, programs


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

def spooled_records(partial: Path) -> bytes:
    """The raw records of the whole Batch frames in a spool being written (a torn last frame skipped).

    Not the file's bytes: the header holds the command line, so a path the
    script names is in the file before any record of the command is.
    """
    records: list[bytes] = []
    with contextlib.suppress(SpoolError), open(partial, "rb") as f:
        records += (r for frame in iter_frames(f) if isinstance(frame, Batch) for r in frame.records)
    return b"".join(records)


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
