"""The daemon as a shared host service: no tenant can lock out, widen, watch or starve another.

One daemon (socket in a fresh /tmp directory, groups made for the module)
serves two members, alice and bob, under tight per-user limits, and a local
user who is no member at all (mallory) tries to read what is not hers.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.daemon import protocol
from tests.daemon_support import CLI, Accounts, DaemonProcess, User, daemon, shared_tmp
from tests.support import Archive, unique_run_id

pytestmark = pytest.mark.kernel

CONNECTIONS_PER_USER = 8
REQUEST_TIMEOUT_S = 8
"""Longer than the default 3 s: root's status and the probe after it fit well within it on a busy host."""
PY = "/usr/bin/python3"
FAST = str(Path(sys.executable).with_name("assay-runner"))
"""The venv's entry point, the C fast client (runner/daemon/fastclient.c) after make setup."""
FLOOR = """version = 1
name = "workspace-only"
[filesystem]
read = ["/"]
write = ["$WORKSPACE", "$TMPDIR", "/dev"]
"""


class World:
    def __init__(self, root: Path, accounts: Accounts, alice: User, bob: User, mallory: User,
                 service: DaemonProcess) -> None:
        self.root, self.accounts, self.daemon = root, accounts, service
        self.alice, self.bob, self.mallory = alice, bob, mallory

    def args(self, out: Path, run_id: str, *cmd: str | Path, extra: tuple[str, ...] = ()) -> list[str | Path]:
        return [*CLI, "run", "--socket", self.daemon.socket, "--out", out, "--run-id", run_id, *extra,
                "--", *cmd]


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    accounts = Accounts()
    root = shared_tmp()
    try:
        sock_group, allowed = accounts.group("tsock"), accounts.group("tok")
        alice = accounts.user("ali", (sock_group, allowed))
        bob = accounts.user("bob", (sock_group, allowed))
        mallory = accounts.user("mal")
        (root / "floor.toml").write_text(FLOOR)
        config = (f'group = "{sock_group}"\n[access]\nallowed_groups = ["{allowed}"]\n'
                  f"[limits]\nmax_concurrent_runs = 4\nmax_runs_per_user = 1\n"
                  f"max_connections_per_user = {CONNECTIONS_PER_USER}\n"
                  f"request_timeout_s = {REQUEST_TIMEOUT_S}\n"
                  f'[floor]\npolicy = "{root / "floor.toml"}"\nworkspace_roots = ["{root}/work-*"]\n')
        with daemon(root, config) as service:
            yield World(root, accounts, alice, bob, mallory, service)
    finally:
        accounts.close()
        shutil.rmtree(root, ignore_errors=True)


HOLDER = """
import json, socket, sys
socks = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    try:
        s.send(b"\\0")  # one byte of a frame header, and nothing more
    except BrokenPipeError:  # over the limit, refused and closed before our byte: the refusal is read below
        pass
    socks.append(s)
print("open", flush=True)
for command in sys.stdin:
    said = []
    for s in socks:
        s.settimeout(0 if command.strip() == "probe" else 20)
        data = b""
        try:
            try:
                while chunk := s.recv(4096):
                    data += chunk
            except ConnectionResetError:  # closed with our byte unread: what it said came first
                pass
            said.append(data[4:].decode(errors="replace") or "closed")
        except (BlockingIOError, TimeoutError):
            said.append("open")  # nothing said, still connected
    print(json.dumps(said), flush=True)
"""


def _status_as_root(path: Path) -> protocol.DaemonMessage:
    """One status request on a fresh connection, and its answer."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))  # blocking: waits while a flood fills the backlog, as a client does
        sock.settimeout(30)
        protocol.send(sock, protocol.StatusQuery(version=protocol.VERSION))
        body = protocol.receive(sock, protocol.FrameReader(max_fds=0))
    assert body is not None
    return protocol.decode_daemon(body)


def test_idle_connections_of_one_member_lock_out_nobody(world: World) -> None:
    user = world.alice
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(world.daemon.socket), "200"],
                              user=user.uid, group=user.gid, extra_groups=list(user.groups), env=user.env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=world.root)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "open"
        reply = _status_as_root(world.daemon.socket)
        holder.stdin.write("probe\n")
        holder.stdin.flush()
        at_status = json.loads(holder.stdout.readline())
        assert isinstance(reply, protocol.StatusReply), reply
        # after root was answered, alice's connections within her limit were still open and idle: the
        # answer did not wait for the request deadline to free them, however fast or slow the host
        assert at_status.count("open") == CONNECTIONS_PER_USER, at_status
        refused = [said for said in at_status if said != "open"]
        assert len(refused) == 200 - CONNECTIONS_PER_USER
        assert all("limits.max_connections_per_user = 8" in said for said in refused), refused[:3]
        # alice's own status while her slots are full: the limit in one line, never a traceback
        mine = user.run([*CLI, "daemon", "status", "--socket", world.daemon.socket], cwd=world.root)
        assert mine.returncode == 125 and mine.stderr.count("\n") == 1, mine.stderr
        assert "limits.max_connections_per_user = 8" in mine.stderr
        holder.stdin.write("wait\n")  # the holder reads each connection until the daemon closes it
        holder.stdin.flush()
        later = json.loads(holder.stdout.readline())
        late = f"within {REQUEST_TIMEOUT_S} s (the daemon's request deadline)"
        expired = [said for said in later if late in said]
        assert len(expired) == CONNECTIONS_PER_USER and "open" not in later, later
    finally:
        holder.kill()
        holder.wait()
    # a member's own requests are served again once the idle ones are gone
    status = user.run([*CLI, "daemon", "status", "--json", "--socket", world.daemon.socket], cwd=world.root)
    assert status.returncode == 0, status.stderr


def _wait_running(world: World, run_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reply = _status_as_root(world.daemon.socket)
        assert isinstance(reply, protocol.StatusReply)
        if any(r.run_id == run_id for r in reply.runs):
            return
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never started: {world.daemon.logs()[-2000:]}")


def test_a_second_user_runs_while_the_first_holds_their_maximum(world: World) -> None:
    alice, bob = world.alice, world.bob
    work_a, work_b = alice.workspace(world.root, "work-hold-a"), bob.workspace(world.root, "work-hold-b")
    hold = unique_run_id("hold")
    wait = f"while [ ! -e {work_a}/stop ]; do sleep 0.05; done"
    first = alice.popen(world.args(work_a / "out", hold, "sh", "-c", wait), cwd=work_a)
    try:
        _wait_running(world, hold)
        again = alice.run(world.args(work_a / "out2", "again", "/bin/true"), cwd=work_a)
        assert again.returncode == 125, again.stderr
        assert again.stderr.count("\n") == 1 and "limits.max_runs_per_user = 1" in again.stderr, again.stderr
        assert Path(FAST).read_bytes()[:4] == b"\x7fELF", "not the fast client: run make setup"
        fast = alice.run([FAST, *world.args(work_a / "out2", "again", "/bin/true")[len(CLI):]], cwd=work_a)
        assert (fast.returncode, fast.stderr) == (125, again.stderr)  # the C client says the same
        assert not (work_a / "out2").exists()
        other = unique_run_id("other")
        proc = bob.run(world.args(work_b / "out", other, "/bin/true"), cwd=work_b)
        assert proc.returncode == 0, proc.stderr
        assert (work_b / "out" / f"{other}.tar.gz").exists()
        assert first.poll() is None  # alice still holds her run
    finally:
        (work_a / "stop").touch()
        first.communicate(timeout=120)
    assert first.returncode == 0


SECRET = "ghp_" + "a1B2c3D4" * 5
"""A token shape the command puts in a path: the raw spool holds it (archives are redacted)."""


def _private_spool(world: World, spool: Path, owner: User | None, work: Path) -> None:
    """`spool` is 0600 for `owner` (root when None): mallory cannot read it, the owner can use it."""
    st = spool.stat()
    assert (st.st_mode & 0o777, st.st_uid) == (0o600, owner.uid if owner else 0)
    assert SECRET.encode() in spool.read_bytes()  # what mallory is after
    peek = world.mallory.run(["cat", spool], cwd=world.root)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr and SECRET not in peek.stdout

    def as_owner(*args: str | Path) -> subprocess.CompletedProcess[str]:
        if owner is not None:
            return owner.run([*CLI, *args], cwd=work)
        return subprocess.run([*CLI, *args], cwd=work, capture_output=True, text=True)

    archive = spool.with_name(spool.name.removesuffix(".spool") + ".tar.gz")
    assert archive.stat().st_mode & 0o777 == 0o644 and SECRET.encode() not in archive.read_bytes()
    rebuilt = work / "rebuilt.tar.gz"
    for proc in (as_owner("normalize", spool, "--out", rebuilt), as_owner("show", archive, "--spool", spool)):
        assert proc.returncode == 0, proc.stderr
    assert rebuilt.read_bytes() == archive.read_bytes()


def test_raw_spools_are_private_to_their_owner_in_daemon_mode(world: World) -> None:
    user = world.alice
    work = user.workspace(world.root, "work-private")
    out = user.workspace(world.root, "out-private")
    out.chmod(0o755)  # anyone may look in: only the spool's own mode keeps it private
    run_id = unique_run_id("private")
    proc = user.run(world.args(out, run_id, "sh", "-c", f"cat {SECRET} 2>/dev/null; true"), cwd=work,
                    env=user.env())
    assert proc.returncode == 0, proc.stderr
    _private_spool(world, out / f"{run_id}.spool", user, work)


def test_raw_spools_are_private_to_root_in_direct_mode(world: World, tmp_path: Path) -> None:
    out = world.root / unique_run_id("direct-out")
    out.mkdir(mode=0o755)
    out.chmod(0o755)
    run_id = unique_run_id("direct")
    proc = subprocess.run([*CLI, "run", "--direct", "--out", out, "--run-id", run_id, "--",
                           "sh", "-c", f"cat {SECRET} 2>/dev/null; true"],
                          cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL, umask=0o022)
    assert proc.returncode == 0, proc.stderr
    _private_spool(world, out / f"{run_id}.spool", None, tmp_path)


def test_the_callers_cwd_cannot_widen_the_floor(world: World) -> None:
    """`cd /` (or into a symlink to `/` inside a workspace) before `run`: $WORKSPACE would be `/`;
    the working directory is not under a workspace root, so the run is refused and nothing written."""
    user = world.alice
    work = user.workspace(world.root, "work-cwd")
    (work / "escape").symlink_to("/")
    target = user.home / f"{unique_run_id('outside')}.txt"
    for cwd in (Path("/"), work / "escape"):
        args = world.args(work / "out", unique_run_id("cwd"), "sh", "-c", f"echo x > {target}")
        proc = user.run(args, cwd=cwd)
        assert proc.returncode == 125 and proc.stderr.count("\n") == 1, proc.stderr
        assert "is not under a workspace root the operator allows" in proc.stderr, proc.stderr
        assert "cd into your workspace" in proc.stderr
        assert not target.exists() and not (work / "out").exists()


def test_the_callers_tmpdir_cannot_widen_the_floor(world: World) -> None:
    """TMPDIR=/: $TMPDIR is the run's own directory, so a write outside the workspace stays blocked
    (and is evidence), while the command's TMPDIR works."""
    user = world.alice
    work = user.workspace(world.root, "work-tmpdir")
    target = user.home / f"{unique_run_id('outside')}.txt"
    run_id = unique_run_id("tmpdir")
    script = f'echo $TMPDIR > seen.txt; echo t > "$TMPDIR/t" && echo wrote >> seen.txt; echo x > {target}; :'
    proc = user.run(world.args(work / "out", run_id, "sh", "-c", script), cwd=work, env=user.env(TMPDIR="/"))
    assert proc.returncode == 0, proc.stderr
    tmpdir, wrote = (work / "seen.txt").read_text().split()
    assert wrote == "wrote" and tmpdir != "/" and Path(tmpdir).name == run_id
    assert not target.exists() and not Path(tmpdir).exists()  # the run's TMPDIR is gone with the run
    blocked = [(e["value"], e["access_mode"]) for e in Archive(work / "out" / f"{run_id}.tar.gz").kernel
               if e["kind"] == "file_blocked"]
    assert blocked == [(str(target), "write")]


RAW_CLIENT = """
import os, socket, sys
from runner.daemon import protocol
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
out = os.open("out", os.O_RDONLY | os.O_DIRECTORY)
cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
request = protocol.RunStart(version=protocol.VERSION, run_id=sys.argv[3], exe=b"/bin/true", argv=[b"true"],
                            env={}, workdir=os.fsencode(sys.argv[2]), out_display="out", ringbuf_pages=64)
protocol.send(sock, request, [0, 1, 2, out, cwd])
print(protocol.decode_daemon(protocol.receive(sock, protocol.FrameReader(max_fds=0))).message)
"""


def test_the_workdir_check_says_nothing_about_paths_the_caller_cannot_see(world: World) -> None:
    """A hand-made request claims a working directory under a root-only directory: whether it
    exists there or not, the answer is the same (the claim is compared, never looked up as root)."""
    user = world.alice
    work = user.workspace(world.root, "work-probe")
    (work / "out").mkdir()
    os.chown(work / "out", user.uid, user.gid)
    hidden = world.root / unique_run_id("root-only")
    (hidden / "exists").mkdir(parents=True)
    hidden.chmod(0o700)
    said = {}
    for name in ("exists", "missing"):
        claim = hidden / name
        args: list[str | Path] = [sys.executable, "-c", RAW_CLIENT, world.daemon.socket, claim,
                                  unique_run_id("probe")]
        proc = user.run(args, cwd=work)
        assert proc.returncode == 0, proc.stderr
        said[name] = proc.stdout.strip().replace(str(claim), "CLAIM")
    assert said["exists"] == said["missing"], said
    assert "is not the directory the client opened" in said["exists"]


def test_root_running_as_another_user_into_a_root_owned_out_is_the_same_with_and_without_the_daemon(
        world: World) -> None:
    work = world.alice.workspace(world.root, "work-rootout")
    outs = {}
    for mode in ("daemon", "direct"):
        out = world.root / unique_run_id(f"root-out-{mode}")
        out.mkdir(mode=0o755)
        run_id = unique_run_id("rootout")
        via = ["--socket", world.daemon.socket] if mode == "daemon" else ["--direct"]
        args = [*CLI, "run", *via, "--user", world.alice.name, "--out", out, "--run-id", run_id,
                "--", "/bin/true"]
        proc = subprocess.run(args, cwd=work, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        files = sorted((p.suffix, p.stat().st_uid, p.stat().st_mode & 0o777) for p in out.iterdir())
        outs[mode] = (proc.returncode, files)
        assert proc.returncode == 0, proc.stderr
    assert outs["daemon"] == outs["direct"] == (0, [(".gz", 0, 0o644), (".spool", 0, 0o600)])


FLOOD = """
import pathlib, sys, threading, time
threading.stack_size(65536)
release = threading.Event()
threads = [threading.Thread(target=release.wait) for _ in range(int(sys.argv[1]))]
for t in threads:
    t.start()
pathlib.Path("ready").touch()
while not pathlib.Path("go").exists():
    time.sleep(0.05)
release.set()
"""


def test_a_thread_flood_degrades_only_its_own_runs_health(world: World) -> None:
    """The task map holds 2048 live tasks for 4 concurrent runs (512 each): one run's 2100 threads
    would fill all of it; its excess is its own untracked tasks, and a quiet run beside it is whole."""
    root = world.root / "flood"
    root.mkdir(mode=0o755)
    sock_group, allowed = world.accounts.groups
    config = (f'group = "{sock_group}"\n[access]\nallowed_groups = ["{allowed}"]\n'
              "[limits]\nmax_concurrent_runs = 4\n[sensor]\ntasks_max = 2048\n")
    with daemon(root, config) as service:
        loud, quiet = world.alice.workspace(root, "loud"), world.bob.workspace(root, "quiet")
        base: list[str | Path] = [*CLI, "run", "--socket", service.socket]
        flood = world.alice.popen([*base, "--out", loud / "out", "--run-id", "flood", "--", PY, "-c", FLOOD,
                                   "2100"], cwd=loud)
        try:
            deadline = time.monotonic() + 120
            while not (loud / "ready").exists():
                assert flood.poll() is None and time.monotonic() < deadline, flood.communicate()
                time.sleep(0.05)
            script = "for i in 1 2 3 4 5; do /bin/true; done; ls / > /dev/null"
            args = [*base, "--out", quiet / "out", "--run-id", "quiet", "--", "sh", "-c", script]
            proc = world.bob.run(args, cwd=quiet)
            assert proc.returncode == 0, proc.stderr
        finally:
            (loud / "go").touch()
            _, err = flood.communicate(timeout=300)
        assert flood.returncode == 0, err
    calm = Archive(quiet / "out" / "quiet.tar.gz").health
    assert calm["cgroup_correlation"] == "clean" and not any("s3_lineage" in n for n in calm["notes"]), calm
    assert sum(e["kind"] == "exec" for e in Archive(quiet / "out" / "quiet.tar.gz").kernel) >= 6
    noisy = Archive(loud / "out" / "flood.tar.gz").health
    assert any(n.startswith("s3_lineage: untracked_tasks=") for n in noisy["notes"]), noisy


PATH_TABLE: dict[str, tuple[str, ...]] = {
    "ok": ("--", "true"),
    "exit_code": ("--", "sh", "-c", "exit 3"),
    "unknown_user": ("--user", "no-such-user-4f1d", "--", "true"),
    "bad_run_id": ("--run-id", "bad id", "--", "true"),
    "secret_run_id": ("--run-id", "xAKIA" + "Q" * 16, "--", "true"),
    "workdir_not_a_directory": ("--workdir", "/etc/hostname", "--", "true"),
    "ringbuf_not_a_power_of_two": ("--ringbuf-pages", "3", "--", "true"),
    "missing_command": ("--", "/nonexistent/assay-cmd"),
    "policy_and_sandbox": ("--policy", "/etc/hostname", "--sandbox", "read-only", "--", "true"),
    "unknown_preset": ("--sandbox", "no-such-preset", "--", "true"),
    "out_is_a_file": ("--out", "{work}/file", "--", "true"),
    "archive_exists": ("--run-id", "{existing}", "--", "true"),
}
"""`run` inputs from tests/test_cli_paths.py and the run checks, each judged the same way in both modes."""


def _outcome(proc: subprocess.CompletedProcess[str], out: Path,
             work: Path) -> tuple[int, list[str], list[str]]:
    """Exit code, error lines (paths of the mode's own directories blanked) and what --out holds."""
    lines = [line.replace(str(out), "OUT").replace(str(work), "WORK") for line in proc.stderr.splitlines()
             if "error" in line or "usage" in line]
    files = sorted(p.suffix for p in out.iterdir()) if out.is_dir() else []
    return proc.returncode, lines, files


@pytest.mark.parametrize("case", sorted(PATH_TABLE))
def test_every_run_input_means_the_same_with_and_without_the_daemon(world: World, case: str) -> None:
    outcomes = {}
    existing = unique_run_id("exists")
    for mode in ("direct", "daemon"):
        work = world.alice.workspace(world.root, f"work-table-{case}-{mode}")
        (work / "file").touch()
        out = work / "out"
        out.mkdir()
        (out / f"{existing}.tar.gz").touch()
        args = [a.format(work=work, existing=existing) for a in PATH_TABLE[case]]
        if "--out" not in args:
            args = ["--out", str(out), *args]
        if "--run-id" not in args:
            args = ["--run-id", "table", *args]
        via = ["--direct"] if mode == "direct" else ["--socket", str(world.daemon.socket)]
        proc = subprocess.run([*CLI, "run", *via, *args], cwd=work, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        assert "Traceback" not in proc.stderr, proc.stderr
        outcomes[mode] = _outcome(proc, out, work)
    assert outcomes["direct"] == outcomes["daemon"]
    code, errors, _ = outcomes["daemon"]
    # a refusal is one error line (argparse's usage line aside); the command's own exit code, none
    assert sum("error:" in line for line in errors) == (code not in (0, 3)), errors


def _scrape(path: Path) -> dict[str, float]:
    """GET /metrics on the daemon's root-only metrics socket, parsed by Prometheus's own text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK"), head
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
            le = sample.labels.get("le")
            name = sample.name + (f"{{{labels}}}" if labels else "") + (f"[le={le}]" if le else "")
            out[name] = sample.value
    return out


def test_the_metrics_endpoint_parses_and_its_counters_add_up_over_a_soak(world: World) -> None:
    metrics = world.daemon.socket.with_name("metrics.sock")
    st = metrics.stat()
    assert (st.st_mode & 0o777, st.st_uid) == (0o600, 0)  # root's only
    before = _scrape(metrics)
    alice, bob = world.alice, world.bob
    work_a, work_b = alice.workspace(world.root, "work-soak-a"), bob.workspace(world.root, "work-soak-b")
    hold = unique_run_id("soak-hold")
    holder = alice.popen(world.args(work_a / "out", hold, "sh", "-c", f"while [ ! -e {work_a}/stop ]; do "
                                    "sleep 0.05; done"), cwd=work_a)
    try:
        _wait_running(world, hold)
        refused = alice.run(world.args(work_a / "out", unique_run_id("soak-again"), "true"), cwd=work_a)
        assert refused.returncode == 125
    finally:
        (work_a / "stop").touch()
        holder.communicate(timeout=120)
    for _ in range(3):
        assert bob.run(world.args(work_b / "out", unique_run_id("soak"), "true"), cwd=work_b).returncode == 0
    outside = bob.run(world.args(work_b / "out", unique_run_id("soak-out"), "true"), cwd=Path("/"))
    assert outside.returncode == 125  # accepted, then refused by its worker: a failed run
    idle = [socket.socket(socket.AF_UNIX) for _ in range(2)]
    for sock in idle:
        sock.connect(str(metrics))  # a scraper that never asks is dropped at the deadline too
    deadline = time.monotonic() + 60
    while _scrape(metrics)["assay_runner_active_runs"] != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    after = _scrape(metrics)
    for sock in idle:
        assert sock.recv(1) == b""  # closed by the daemon
        sock.close()

    def delta(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    started = delta("assay_runner_runs_started_total")
    ok, failed = (delta(f"assay_runner_runs_finished_total{{result={r}}}") for r in ("ok", "failed"))
    assert (started, ok, failed) == (5, 4, 1)
    assert delta("assay_runner_runs_refused_total{reason=runs_per_user}") == 1
    assert sum(delta(k) for k in after if k.startswith("assay_runner_runs_refused_total")) == 1
    for histogram in ("assay_runner_start_to_exec_seconds", "assay_runner_archive_ready_seconds"):
        assert delta(f"{histogram}_count") == ok  # every run that ran its command, once
        assert delta(f"{histogram}_sum") > 0
        assert delta(f"{histogram}_bucket[le=+Inf]") == ok
    assert delta("assay_runner_ring_drops_total") >= 0 and delta("assay_runner_untracked_tasks_total") == 0
    status = subprocess.run([*CLI, "daemon", "status", "--json", "--socket", world.daemon.socket],
                            capture_output=True, text=True, check=True)
    assert json.loads(status.stdout)["metrics"]["assay_runner_runs_started_total"] >= after[
        "assay_runner_runs_started_total"]
