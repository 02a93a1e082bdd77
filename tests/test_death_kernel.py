"""A runner killed with SIGKILL takes its command with it at once, and the recovery says what was missed.

The command creates a file every millisecond; the kernel stamps each with
its change time (a coarse clock: it is never later than the true time). The
test takes CLOCK_REALTIME just before the kill: no file may carry a change
time more than 50 ms after it. Without the warden (runner/capture/warden.py)
the command ran on for seconds (the runner's exit released its tracepoint
attachments, one RCU grace period each, before its helper got PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults_kernel import WAIT_S, Job, job, running, spooled_records

from runner.daemon.staging import STAGING
from tests.daemon_support import CLI, DaemonProcess, daemon, shared_tmp
from tests.support import Archive, assay

pytestmark = pytest.mark.kernel
__all__ = ["job"]
FAST = str(Path(sys.executable).with_name("assay-runner"))
"""The C fast client (runner/daemon/fastclient.c, after make setup): it returns the moment the run does."""
BAR_NS = 50_000_000
"""The bar: nothing of the command may happen later than this after the kill."""
CREATOR = """import os, sys, time
d = sys.argv[1]
i = 0
while True:
    open(os.path.join(d, "f%d" % i), "w").close()
    i += 1
    time.sleep(0.001)
"""


def ctimes(files: Path) -> list[int]:
    return [e.stat().st_ctime_ns for e in os.scandir(files)]


def creating(job: Job, run_id: str) -> tuple[object, set[int], Path]:
    """A run whose command creates a file every millisecond, once its records reach the spool."""
    files = job.tmp / "files"
    files.mkdir()
    creator = job.tmp / "creator.py"
    creator.write_text(CREATOR)
    runner, programs = running(job, run_id, f"/usr/bin/python3 {creator} {files} & touch $MARK; wait")
    partial = job.out / f"{run_id}.spool.partial"
    deadline = time.monotonic() + WAIT_S
    while b"creator.py" not in spooled_records(partial) or len(os.listdir(files)) < 50:
        assert runner.poll() is None, runner.communicate()
        assert time.monotonic() < deadline, "the command's records never reached the partial spool"
        time.sleep(0.02)
    return runner, programs, files


def test_a_killed_runner_leaves_no_unobserved_window_and_the_recovery_names_the_interval(job: Job) -> None:
    """Also: the killed runner stays a zombie (nobody reaps it, as when its own parent is gone and pid 1
    is slow), and the next start still takes it for dead."""
    run_id = f"death-{job.token}"
    runner, programs, files = creating(job, run_id)
    cgroups = job.run_cgroups()
    killed_at = time.time_ns()
    os.kill(runner.pid, signal.SIGKILL)
    os.waitid(os.P_PID, runner.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
    deadline = time.monotonic() + WAIT_S
    while job.processes() and time.monotonic() < deadline:  # then nothing can create files any more
        time.sleep(0.05)
    stamps = ctimes(files)
    late = [t - killed_at for t in stamps if t > killed_at]
    assert max(stamps) - killed_at <= BAR_NS, (
        f"{len(late)} of {len(stamps)} files were created after the kill, the last "
        f"{(max(stamps) - killed_at) / 1e6:.1f} ms after it")
    assert Path(f"/proc/{runner.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    nxt = job.run(f"next-{job.token}", "/bin/true", out=job.tmp / "out2")
    runner.communicate(timeout=WAIT_S)
    assert nxt.returncode == 0, nxt.stderr
    for cg in cgroups:  # v2 run cgroup and the v1 pids limit group
        assert f"removed the cgroup {cg} of a runner that died (pid {runner.pid})" in nxt.stderr, nxt.stderr
    archive = job.out / f"{run_id}.tar.gz"
    assert f"rebuilt {archive} from the dead run's spool" in nxt.stderr, nxt.stderr
    assert assay("validate", archive).returncode == 0
    health = Archive(archive).health
    assert health["kernel_layer"] != "complete" and health["ringbuf_drops"] >= 1
    (note,) = [n for n in health["notes"] if n.startswith("s2_run_recovered:")]
    assert re.search(r" unobserved=last_flush\.\.runner_death unobserved_ms=[0-9]+\.[0-9]$", note), note
    job.assert_clean(programs)


def test_a_killed_daemon_worker_leaves_no_unobserved_window_and_its_run_reaches_the_caller(
        tmp_path: Path) -> None:
    """The same for a daemon run (a daemon of the test's own, on its own socket): the worker is
    killed, the command with it; the daemon rebuilds the archive and delivers it to the caller's
    `--out` through the descriptor it kept, says so on the caller's connection, and keeps no staging."""
    run_id = f"wdeath-{secrets.token_hex(6)}"
    files, creator, out = tmp_path / "files", tmp_path / "creator.py", tmp_path / "out"
    files.mkdir()
    out.mkdir()
    creator.write_text(CREATOR)
    root = shared_tmp()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        service = cleanup.enter_context(daemon(root, ""))
        client = subprocess.Popen(
            [*CLI, "run", "--socket", service.socket, "--out", out, "--run-id", run_id, "--",
             "/usr/bin/python3", creator, files],
            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        worker = _worker_with_records(service, run_id, client, files)
        killed_at = time.time_ns()
        os.kill(worker, signal.SIGKILL)
        _, err = client.communicate(timeout=WAIT_S)
        stamps = ctimes(files)
        assert max(stamps) - killed_at <= BAR_NS, (
            f"{sum(t > killed_at for t in stamps)} of {len(stamps)} files were created after the kill, the "
            f"last {(max(stamps) - killed_at) / 1e6:.1f} ms after it")
        assert client.returncode == 125, err
        archive, spool = out / f"{run_id}.tar.gz", out / f"{run_id}.spool"
        assert (f"the daemon's worker for run {run_id} was killed (SIGKILL); the command was killed with it; "
                f"delivered: {spool}, {archive} (marked partial: s2_run_recovered)") in err, (
                    err + service.logs()[-3000:])
        assert assay("validate", archive).returncode == 0
        health = Archive(archive).health
        assert health["kernel_layer"] != "complete" and health["ringbuf_drops"] >= 1
        (note,) = [n for n in health["notes"] if n.startswith("s2_run_recovered:")]
        assert re.search(r" unobserved=last_flush\.\.runner_death unobserved_ms=[0-9]+\.[0-9]$", note), note
        assert not list(STAGING.glob(f"{run_id}.*")), "the killed worker's staging directory was kept"


def _worker_with_records(service: DaemonProcess, run_id: str, client: subprocess.Popen[str],
                         files: Path) -> int:
    """The worker of `run_id` once its command's records are flowing and files are being made."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert client.poll() is None, client.communicate()
        status = subprocess.run([*CLI, "daemon", "status", "--json", "--socket", service.socket],
                                capture_output=True, text=True)
        runs = [r for r in json.loads(status.stdout or "{}").get("runs", []) if r["run_id"] == run_id]
        partial = [p for p in STAGING.glob(f"{run_id}.*/{run_id}.spool.partial")]
        if runs and runs[0]["events"] > 0 and len(os.listdir(files)) >= 50 and partial \
                and b"creator.py" in spooled_records(partial[0]):
            return int(runs[0]["worker_pid"])
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never got going: {service.logs()[-3000:]}")


def test_run_lets_go_of_its_out_directory_before_it_returns(job: Job) -> None:
    """Nothing the run started (the monitor's background release, the warden, the live normalizer)
    keeps `--out` open once `run` returns: a tmpfs holding it unmounts at once (no --lazy)."""
    mnt = job.tmp / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        done = job.run(f"umount-{job.token}", "/bin/sh", "-c", "cat /etc/hostname", out=mnt)
        unmount = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert unmount.returncode == 0, unmount.stderr
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["umount", "--lazy", str(mnt)], check=True)
    job.assert_clean()


def test_a_limit_the_kernel_refuses_names_the_reason(job: Job) -> None:
    proc = job.run(f"mem1-{job.token}", "/bin/true", options=("--memory-max", "1"))
    assert proc.returncode == 125, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("assay-runner: error:")]
    assert re.fullmatch(r"assay-runner: error: cannot start the command's namespace: its helper process was "
                        r"killed by SIGKILL before it could say why; the run's cgroup limits refused it "
                        r"\(oom_kills=[1-9][0-9]*; limits: memory_max=1 pids_max=[0-9]+\): a limit this low "
                        r"leaves no room to start any process", line), line
    job.assert_clean()


def test_a_daemon_run_lets_go_of_its_out_directory_before_the_client_returns(tmp_path: Path) -> None:
    """The same through the daemon: neither its worker nor the daemon (which keeps a copy of the
    caller's `--out` to deliver a killed worker's run) holds `--out` once the client has returned."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    root = shared_tmp()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        with daemon(root, "") as service:
            done = subprocess.run([FAST, "run", "--socket", service.socket, "--out", mnt, "--run-id",
                                   f"dumount-{secrets.token_hex(4)}", "--", "/bin/true"],
                                  cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            unmount = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr + service.logs()[-2000:]
            assert unmount.returncode == 0, unmount.stderr
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["umount", "--lazy", str(mnt)], check=True)
        shutil.rmtree(root, ignore_errors=True)
