"""The daemon against the real kernel, used by real unprivileged users.

One daemon (socket in a fresh /tmp directory, group and allowed groups
made for the module) serves users created with useradd: a member, an
outsider who may open the socket but is not in an allowed group, and a
stranger who may not even open it. The floor policy lets commands write
only their workspace's `ok/` tree.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runner.daemon import protocol
from spool.format import read_spool
from tests.daemon_support import CLI, Accounts, DaemonProcess, User, daemon, shared_tmp
from tests.support import Archive

pytestmark = pytest.mark.kernel

AGENT = Path(__file__).parent / "programs" / "daemon" / "agent.py"
DETERMINISM = Path(__file__).parent / "programs" / "determinism"
PY = "/usr/bin/python3"
FAST = [str(Path(sys.executable).with_name("assay-runner"))]
"""The venv's entry point, the C fast client (runner/daemon/fastclient.c) after make setup."""
FLOOR = """version = 1
name = "ci-floor"
[filesystem]
read = ["/"]
write = ["$WORKSPACE", "/dev", "/tmp"]
"""


class World:
    def __init__(self, root: Path, accounts: Accounts, member: User, outsider: User, stranger: User,
                 service: DaemonProcess) -> None:
        self.root, self.accounts, self.daemon = root, accounts, service
        self.member, self.outsider, self.stranger = member, outsider, stranger

    def run(self, user: User, work: Path, run_id: str, *cmd: str | Path, out: Path | None = None,
            extra: tuple[str, ...] = (), env: dict[str, str] | None = None,
            cli: list[str] = CLI) -> subprocess.CompletedProcess[str]:
        args = [*cli, "run", "--socket", self.daemon.socket, "--out", out or work / "out", "--run-id", run_id,
                "--force", *extra, "--", *cmd]
        return user.run(args, cwd=work, env=env)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    accounts = Accounts()
    root = shared_tmp()
    try:
        sock_group, allowed = accounts.group("sock"), accounts.group("ok")
        member = accounts.user("mem", (sock_group, allowed))
        outsider = accounts.user("out", (sock_group,))
        stranger = accounts.user("str")
        (root / "floor.toml").write_text(FLOOR)
        config = (f'group = "{sock_group}"\n[access]\nallowed_groups = ["{allowed}"]\n'
                  f'[limits]\nmax_concurrent_runs = 8\nmax_runs_per_user = 8\npids_max = 64\n'
                  f'memory_max = "1G"\n'
                  f'[floor]\npolicy = "{root / "floor.toml"}"\nworkspace_roots = ["{root}/*"]\n')
        with daemon(root, config) as service:
            yield World(root, accounts, member, outsider, stranger, service)
    finally:
        accounts.close()
        shutil.rmtree(root, ignore_errors=True)


def _agent(world: World, user: User, tag: str, port: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    work = user.workspace(world.root, f"work-{tag}")
    proc = world.run(user, work, f"agent-{tag}", PY, AGENT, work / "report.json", tag, str(port),
                     env=user.env(AGENT_TAG=tag))
    assert proc.returncode == 0, proc.stderr + world.daemon.logs()[-3000:]
    return proc, work


def test_a_user_runs_an_agent_with_its_own_ids_and_gets_its_archive(world: World) -> None:
    user = world.member
    proc, work = _agent(world, user, "solo", 9)
    report = json.loads((work / "report.json").read_text())
    assert (report["uid"], report["euid"], report["child_uid"]) == (user.uid, user.uid, user.uid)
    assert sorted(report["groups"]) == sorted(user.groups)
    assert report["cwd"] == str(work) and report["env_tag"] == "solo"
    archive = work / "out" / "agent-solo.tar.gz"
    st = archive.stat()
    assert (st.st_uid, st.st_gid) == (user.uid, user.gid)
    assert (work / "out" / "agent-solo.spool").stat().st_uid == user.uid
    assert "archive:" in proc.stderr and str(archive) in proc.stderr
    check = user.run([*CLI, "validate", archive], cwd=work)
    assert check.returncode == 0, check.stdout + check.stderr
    written = Archive(archive).values("openat")
    assert str(work / "marker-solo-0.txt") in written
    assert '"normalized_by": "live"' in world.daemon.logs()  # the worker normalized while it ran (live.py)


def test_outsiders_are_refused_with_a_clear_error(world: World) -> None:
    for user, expected in ((world.outsider, "is not in a group allowed to use the assay-runner daemon"),
                           (world.stranger, "not allowed to use the assay-runner daemon at")):
        work = user.workspace(world.root, f"work-{user.name}")
        proc = world.run(user, work, "refused", "/bin/true")
        assert proc.returncode == 125
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], proc.stderr
        assert not (work / "out" / "refused.tar.gz").exists()


def test_a_user_cannot_write_evidence_where_it_could_not_write(world: World) -> None:
    user = world.member
    work = user.workspace(world.root, "work-nowrite")
    forbidden = world.root / "root-only"
    forbidden.mkdir(exist_ok=True)
    forbidden.chmod(0o755)
    proc = world.run(user, work, "nowrite", "/bin/true", out=forbidden)
    assert proc.returncode == 125 and "cannot write to --out" in proc.stderr
    assert list(forbidden.iterdir()) == []


def test_eight_concurrent_runs_see_only_their_own_events(world: World) -> None:
    user = world.member
    tags = [f"c{i}" for i in range(8)]
    with ThreadPoolExecutor(len(tags)) as pool:
        results = list(pool.map(lambda i: _agent(world, user, tags[i], 41000 + i), range(len(tags))))
    for i, (_, work) in enumerate(results):
        archive = Archive(work / "out" / f"agent-{tags[i]}.tar.gz")
        opened = " ".join(archive.values("openat"))
        endpoints = set(archive.values("connect"))
        assert all(str(work / f"marker-{tags[i]}-{n}.txt") in opened for n in range(3))
        assert f"127.0.0.1:{41000 + i}" in endpoints
        for j, other in enumerate(tags):
            if j != i:
                assert f"marker-{other}-" not in opened and f"127.0.0.1:{41000 + j}" not in endpoints
        assert archive.health["ringbuf_drops"] == 0 and archive.health["cgroup_correlation"] == "clean"


def test_a_callers_policy_cannot_loosen_the_floor(world: World) -> None:
    user = world.member
    work = user.workspace(world.root, "work-floor")
    forbidden = user.home / "forbidden.txt"  # the user may write its home; the floor says no
    script = f"echo a > allowed.txt; echo b > {forbidden}; echo done"
    out = user.workspace(world.root, "out-floor")
    proc = world.run(user, work, "floor", "sh", "-c", script, out=out,
                     extra=("--sandbox", "danger-full-access"))
    assert proc.returncode == 0, proc.stderr
    assert (work / "allowed.txt").exists() and not forbidden.exists()
    blocked = [(e["value"], e["access_mode"]) for e in Archive(out / "floor.tar.gz").kernel
               if e["kind"] == "file_blocked"]
    assert blocked == [(str(forbidden), "write")]  # the floor's denial is evidence, the allowed write is not
    # the permission verdict reached the caller's spool: it is delivered only once nothing more is added
    # (runner/daemon/staging.py Delivery, while the archive is made), and it rebuilds the same archive
    assert read_spool(out / "floor.spool").dac == {f"write:{forbidden}": True}
    assert '"normalized_by": "offline_dac"' in world.daemon.logs()
    again = out / "again.tar.gz"
    rebuilt = user.run([*CLI, "normalize", out / "floor.spool", "--out", again], cwd=work)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert again.read_bytes() == (out / "floor.tar.gz").read_bytes()


def test_per_run_limits_hold(world: World) -> None:
    user = world.member
    work = user.workspace(world.root, "work-limits")
    # each child lives until the loop is over (a pipe's EOF), however slowly the host forks
    script = ("import os\nended, forked = os.pipe()\nn=0\nfor _ in range(200):\n  try:\n    pid=os.fork()\n"
              "  except OSError:\n    break\n"
              "  if pid==0:\n    os.close(forked); os.read(ended, 1); os._exit(0)\n  n+=1\n"
              "os.close(forked)\nprint(n)\n")
    proc = world.run(user, work, "limits", PY, "-c", script)
    assert proc.returncode == 0, proc.stderr
    started = int(proc.stdout.split()[0])
    assert 0 < started < 64, f"pids.max = 64 should have stopped the fork loop, it started {started}"


HEAVY = ("normalizer.build", "normalizer.decode", "normalizer.tree", "runner.capture.session",
         "runner.capture.spawn", "runner.evidence.validate", "runner.evidence.publish", "ebpf.monitor")
"""The normalizer pipeline and the capture side. The client does use two stdlib-only normalizer
modules (normalizer.artifacts and normalizer.redact: the contract's run-id rules)."""


def test_the_client_imports_nothing_heavy(world: World) -> None:
    user = world.member
    work = user.workspace(world.root, "work-light")
    code = (f"import sys, runner.cli.main as m\nHEAVY = {HEAVY!r}\n"
            f"rc = m.main(['run', '--socket', '{world.daemon.socket}', '--out', 'out', '--run-id', 'light',"
            " '--', '/bin/true'])\n"
            "heavy = sorted(k for k in sys.modules if k.split('.')[0] in ('bcc', 'pyroute2', 'structlog')\n"
            "               or k in HEAVY)\n"
            "print(rc, heavy)\n")
    proc = user.run([sys.executable, "-c", code], cwd=work)
    assert proc.stdout.strip() == "0 []", proc.stdout + proc.stderr
    assert (work / "out" / "light.tar.gz").exists()


def test_ctrl_c_and_disconnect_end_the_run(world: World) -> None:
    user = world.member
    for label, signum in (("int", signal.SIGINT), ("gone", signal.SIGKILL)):
        work = user.workspace(world.root, f"work-{label}")
        client = user.popen([*CLI, "run", "--socket", world.daemon.socket, "--out", work / "out",
                             "--run-id", label, "--", "sleep", "60"], cwd=work)
        archive = work / "out" / f"{label}.tar.gz"
        _wait_for_run(world.daemon, label, client)
        client.send_signal(signum)
        _, err = client.communicate(timeout=60)
        deadline = time.monotonic() + 60
        while not archive.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        notes = Archive(archive).health["notes"]
        if signum == signal.SIGINT:
            assert client.returncode == 130, err  # the run was ended by Ctrl-C, as in direct mode
            assert "s2_run_ended: reason=sigint phase=command" in notes
        else:
            assert "s2_run_ended: reason=client_disconnected phase=command" in notes


def _until_exists(path: Path) -> list[str]:
    """A command that runs until the test creates `path` (a run that lasts as long as the test needs)."""
    return ["sh", "-c", f"while [ ! -e {path} ]; do sleep 0.05; done"]


def _wait_for_run(service: DaemonProcess, run_id: str, client: subprocess.Popen[str]) -> None:
    """Until `service` lists `run_id` with events (its command is running, observed); a client that
    ends first, or a run never listed, fails with what the client, the status and the daemon said."""
    deadline = time.monotonic() + 60
    said = ""
    while time.monotonic() < deadline:
        if client.poll() is not None:
            out, err = client.communicate()
            raise AssertionError(f"the client of run {run_id} ended ({client.returncode}) before it was "
                                 f"listed: {out}{err}\ndaemon log:\n{service.logs()[-4000:]}")
        status = subprocess.run([*CLI, "daemon", "status", "--json", "--socket", service.socket],
                                capture_output=True, text=True)
        said = status.stdout + status.stderr
        if status.returncode == 0 and any(r["run_id"] == run_id and r["events"] > 0
                                          for r in json.loads(status.stdout)["runs"]):
            return
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never showed up in daemon status: {said}\n"
                         f"daemon log:\n{service.logs()[-4000:]}")


def _status(world: World) -> dict:
    return json.loads(subprocess.run([*CLI, "daemon", "status", "--json", "--socket", world.daemon.socket],
                                     capture_output=True, text=True, check=True).stdout)


def test_status_lists_active_runs(world: World) -> None:
    user = world.member
    work = user.workspace(world.root, "work-status")
    idle_programs = _status(world)["bpf_programs"]
    go = work / "go"  # the run lasts until the test has seen it listed
    client = user.popen([*CLI, "run", "--socket", world.daemon.socket, "--out", work / "out",
                         "--run-id", "watched", "--", *_until_exists(go)], cwd=work)
    _wait_for_run(world.daemon, "watched", client)
    text = subprocess.run([*CLI, "daemon", "status", "--socket", world.daemon.socket],
                          capture_output=True, text=True, check=True).stdout
    programs = _status(world)["bpf_programs"]
    go.touch()
    assert "watched" in text and user.name in text and "BPF programs loaded" in text
    assert programs == idle_programs > 0  # loaded once, nothing per run
    client.communicate(timeout=60)
    assert client.returncode == 0


def test_only_the_sensor_process_holds_bpf(world: World) -> None:
    """The daemon's main loop (and so every worker it forks) never loads BCC or holds a BPF
    program: forks stay cheap. The sensor holds them (loaded from the compiled-object cache, so
    it need not have mapped libbcc either)."""
    logs = world.daemon.logs()
    sensor = next(json.loads(line)["sensor_pid"] for line in logs.splitlines()
                  if '"daemon.sensor_loaded"' in line)
    assert "libbcc" not in Path(f"/proc/{world.daemon.proc.pid}/maps").read_text()
    assert not _bpf_program_fds(world.daemon.proc.pid)
    assert _bpf_program_fds(sensor)


def _bpf_program_fds(pid: int) -> list[str]:
    """The fds of process `pid` that are BPF programs."""
    fds = Path(f"/proc/{pid}/fd")
    return [fd.name for fd in fds.iterdir() if os.readlink(fd) == "anon_inode:bpf-prog"]


def test_sigterm_ends_runs_and_writes_their_archives(world: World) -> None:
    user = world.member
    root = world.root / "second"
    root.mkdir()
    root.chmod(0o755)
    group = world.accounts.groups[1]
    with daemon(root, f'[access]\nallowed_groups = ["{group}"]\n') as service:
        os.chmod(service.socket, 0o666)  # this daemon's socket is root's group: open it for the test
        work = user.workspace(world.root, "work-term")
        client = user.popen([*CLI, "run", "--socket", service.socket, "--out", work / "out",
                             "--run-id", "term", "--", "sleep", "60"], cwd=work)
        _wait_for_run(service, "term", client)
        assert service.stop() == 0
        _, err = client.communicate(timeout=60)
    assert client.returncode == 137, err
    assert "ended from outside: reason=daemon_shutdown" in err
    archive = Archive(work / "out" / "term.tar.gz")
    assert "s2_run_ended: reason=daemon_shutdown phase=command" in archive.health["notes"]
    assert not service.socket.exists()


WORKLOADS = {
    "pipeline": (lambda w: (w / "words.txt").write_text("pear apple fig apple pear apple\n"),
                 ["sh", str(DETERMINISM / "pipeline.sh")]),
    "fork_children": (lambda w: None, [PY, str(DETERMINISM / "fork_children.py")]),
    "threads": (lambda w: [(w / f"input-{i}.txt").write_text(f"input {i}\n") for i in range(4)],
                [PY, str(DETERMINISM / "threads_files.py")]),
}


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_daemon_runs_are_byte_identical_to_each_other_and_to_direct_mode(world: World, workload: str) -> None:
    user = world.member
    prepare, cmd = WORKLOADS[workload]
    outs = []
    for n in range(4):
        work = user.workspace(world.root, f"det-{workload}")  # the same path, fresh, every run
        prepare(work)
        for path in work.iterdir():
            os.chown(path, user.uid, user.gid)
        out = world.root / f"det-out-{workload}-{n}"
        if n < 3:
            out.mkdir()
            os.chown(out, user.uid, user.gid)
            proc = world.run(user, work, f"det-{workload}", *cmd, out=out)
        else:  # direct mode, as root dropping to the same user, under the floor as its own policy
            proc = subprocess.run([*CLI, "run", "--direct", "--user", user.name, "--policy",
                                   world.root / "floor.toml", "--out", out, "--run-id", f"det-{workload}",
                                   "--", *cmd], cwd=work, capture_output=True, text=True,
                                  env=user.env(), stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        outs.append((out / f"det-{workload}.tar.gz").read_bytes())
    assert outs[0] == outs[1] == outs[2], "daemon-mode runs differ"
    assert outs[0] == outs[3], "daemon mode differs from direct mode"


def test_hostile_peers_get_an_answer_and_do_not_stall_the_daemon(world: World) -> None:
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(str(world.daemon.socket))  # connects and never says anything
    answers = []
    for payload in (b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1", struct.pack(">I", 1 << 30),
                    protocol.encode(protocol.StatusQuery(version=7))):
        with socket.socket(socket.AF_UNIX) as peer:
            peer.settimeout(10)
            peer.connect(str(world.daemon.socket))
            peer.sendall(payload)
            body = protocol.receive(peer, protocol.FrameReader(max_fds=0))
            assert body is not None  # the daemon answered
            answers.append(protocol.decode_daemon(body))
    assert [type(a) for a in answers] == [protocol.Refused] * 3
    refused = [a for a in answers if isinstance(a, protocol.Refused)]  # all three, as just asserted
    assert "bad request" in refused[0].message and "frame larger" in refused[1].message
    assert "protocol version 7 is not supported" in refused[2].message
    status = subprocess.run([*CLI, "daemon", "status", "--json", "--socket", world.daemon.socket],
                            capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr
    silent.close()


def test_socket_activation_serves_on_the_inherited_socket(tmp_path: Path) -> None:
    """As under assay-runner.socket: the listening socket arrives as fd 3 (LISTEN_FDS)."""
    activate = shutil.which("systemd-socket-activate")
    assert activate, "systemd-socket-activate is missing: scripts/setup.sh installs the systemd package"
    sock = tmp_path / "activated.sock"
    proc = subprocess.Popen([activate, "--listen", str(sock), *CLI, "--log-format", "json", "daemon",
                             "--socket", str(tmp_path / "unused.sock")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        status = subprocess.run([*CLI, "daemon", "status", "--json", "--socket", sock],
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["runs"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert sock.exists() and not (tmp_path / "unused.sock").exists()  # systemd's socket is left alone


def test_the_command_gets_the_callers_terminal_umask_and_limits(world: World) -> None:
    """Its stdio is the caller's terminal (the status line is drawn there too); umask, limits the caller's."""
    user = world.member
    work = user.workspace(world.root, "work-tty")
    go = work / "go"  # the command lasts until the client's status line was seen drawn
    inner = f"tty; umask; ulimit -n; {shlex.join(_until_exists(go))}"
    client = (f"ulimit -n 300; umask 027; exec {shlex.join(map(str, CLI))} run "
              f"--socket {world.daemon.socket} --out out --run-id tty -- sh -c {shlex.quote(inner)}")
    master, slave = pty.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(["sh", "-c", client], cwd=work, user=user.uid, group=user.gid,
                            extra_groups=list(user.groups), env=user.env(TERM="xterm"), stdin=slave,
                            stdout=slave,
                            stderr=slave, start_new_session=True)
    os.close(slave)
    status = re.compile(r"\x1b7(\x1b\[[\d;]*[A-Zmr])*(\[assay-runner\] \d+ events · \d+ drops · [\d.]+s)?"
                        r"\x1b8|\x1bD\x1b\[1A")  # the status row: taken, drawn, given back (terminal.py)
    output = b""
    deadline = time.monotonic() + 60
    while True:
        if not go.exists() and (any(m[2] for m in status.finditer(output.decode(errors="replace")))
                                or time.monotonic() > deadline):  # drawn (or never: the assert below)
            go.touch()
        if not select.select([master], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: every holder of the slave is gone
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0
    text = output.decode(errors="replace").replace("\r", "")
    assert any(m[2] for m in status.finditer(text)), text  # the live status line, drawn by the client
    lines = status.sub("", text).splitlines()
    assert lines[0].startswith("/dev/pts/"), text
    assert lines[1:3] == ["0027", "300"], text
    assert "assay-runner: command exited 0" in text


def test_the_command_cannot_touch_its_evidence_while_it_runs(world: World) -> None:
    """The command has the caller's uid, so it may write the caller's --out: the evidence is elsewhere
    until the command is gone, and what it planted there is replaced by the real thing."""
    user = world.member
    work = user.workspace(world.root, "work-forge")
    out = user.workspace(world.root, "out-forge")
    script = (f"ls -A {out} > seen.txt; echo forged > {out}/forge.tar.gz; echo forged > {out}/forge.spool; "
              f"cat /etc/hostname > /dev/null")
    proc = world.run(user, work, "forge", "sh", "-c", script, out=out)
    assert proc.returncode == 0, proc.stderr
    assert (work / "seen.txt").read_text() == ""  # nothing of the run was in --out while it ran
    check = user.run([*CLI, "validate", out / "forge.tar.gz"], cwd=work)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "/etc/hostname" in Archive(out / "forge.tar.gz").values("openat")
    assert (out / "forge.spool").read_bytes() != b"forged\n"
    assert sorted(p.name for p in out.iterdir()) == ["forge.spool", "forge.tar.gz"]


RAW_CLIENT = """
import os, socket, sys
from runner.daemon import protocol
from spool.format import read_spool
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
out = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECTORY)
cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
request = protocol.RunStart(version=protocol.VERSION, run_id="raw", exe=b"/bin/true", argv=[b"true"],
                            env={}, workdir=os.fsencode(os.getcwd()), out_display=sys.argv[2],
                            ringbuf_pages=64, user=int(sys.argv[3]))
protocol.send(sock, request, [0, 1, 2, out, cwd])
print(protocol.decode_daemon(protocol.receive(sock, protocol.FrameReader(max_fds=0))))
"""


def test_a_client_that_skips_its_own_checks_is_still_held_to_the_callers_rights(world: World) -> None:
    """A hand-made request: an --out the caller may only read, then another uid than its own."""
    user = world.member
    work = user.workspace(world.root, "work-raw")
    for out, uid, expected in (("/etc", user.uid, "may not write there"),
                               (str(work), 0, "may only run commands as itself")):
        proc = user.run([sys.executable, "-c", RAW_CLIENT, world.daemon.socket, out, str(uid)], cwd=work)
        assert "Refused" in proc.stdout and expected in proc.stdout, proc.stdout + proc.stderr
    assert not Path("/etc/raw.tar.gz").exists() and not Path("/etc/raw.spool").exists()


def test_runs_beyond_the_limit_are_refused_not_queued(world: World) -> None:
    user = world.member
    root = world.root / "third"
    root.mkdir()
    root.chmod(0o755)
    group = world.accounts.groups[1]
    config = (f'[access]\nallowed_groups = ["{group}"]\n[limits]\nmax_concurrent_runs = 1\n'
              "max_runs_per_user = 2\n")
    with daemon(root, config) as service:
        os.chmod(service.socket, 0o666)
        work = user.workspace(world.root, "work-limit")
        base: list[str | Path] = [*CLI, "run", "--socket", service.socket]
        go = work / "go"  # the first run lasts until the test has asked for the second
        first = user.popen([*base, "--out", work / "out", "--run-id", "first", "--", *_until_exists(go)],
                           cwd=work)
        _wait_for_run(service, "first", first)
        second = user.run([*base, "--out", work / "out2", "--run-id", "second", "--", "/bin/true"], cwd=work)
        go.touch()
        assert second.returncode == 125
        assert "limits.max_concurrent_runs = 1" in second.stderr and not (work / "out2").exists()
        first.communicate(timeout=120)
        assert first.returncode == 0


MEMORY_LIMIT = """
from pathlib import Path
for line in Path("/proc/self/cgroup").read_text().splitlines():
    _, controllers, path = line.split(":", 2)
    if "memory" in controllers.split(","):  # cgroup v1 hierarchy (hybrid hosts)
        print(Path(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes").read_text().strip())
        break
    if controllers == "" and Path(f"/sys/fs/cgroup{path}/memory.max").exists():  # unified
        print(Path(f"/sys/fs/cgroup{path}/memory.max").read_text().strip())
        break
"""


def test_the_memory_limit_is_set_on_the_runs_own_cgroup(world: World) -> None:
    user = world.member
    work = user.workspace(world.root, "work-memory")
    proc = world.run(user, work, "memory", PY, "-c", MEMORY_LIMIT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == str(1 << 30)  # memory_max = "1G" in the module's config


def test_the_fast_client_serves_users_as_the_python_client_does(world: World) -> None:
    """The C client on the real daemon: the user's own ids and archive; refusals in the same words."""
    assert Path(FAST[0]).read_bytes()[:4] == b"\x7fELF", "not the fast client: run make setup"
    user = world.member
    work = user.workspace(world.root, "work-fast")
    proc = world.run(user, work, "fast", PY, AGENT, work / "report.json", "fast", "11", cli=FAST,
                     env=user.env(AGENT_TAG="fast"))
    assert proc.returncode == 0, proc.stderr + world.daemon.logs()[-3000:]
    report = json.loads((work / "report.json").read_text())
    assert (report["uid"], report["euid"], report["cwd"]) == (user.uid, user.uid, str(work))
    archive = work / "out" / "fast.tar.gz"
    assert archive.stat().st_uid == user.uid and f"archive:           {archive}" in proc.stderr
    assert user.run([*CLI, "validate", archive], cwd=work).returncode == 0
    forbidden = world.root / "root-only"
    forbidden.mkdir(exist_ok=True)
    for who, out in ((world.outsider, None), (world.stranger, None), (user, forbidden)):
        work = who.workspace(world.root, f"work-fast-{who.name}")
        said = {name: world.run(who, work, "refused", "/bin/true", out=out, cli=cli)
                for name, cli in (("python", CLI), ("fast", FAST))}
        assert said["fast"].returncode == said["python"].returncode == 125
        assert said["fast"].stderr == said["python"].stderr and said["fast"].stderr.count("\n") == 1


def _children(pid: int) -> set[int]:
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def _sensor_pid(world: World) -> int:
    line = next(ln for ln in world.daemon.logs().splitlines() if '"daemon.sensor_loaded"' in ln)
    return int(json.loads(line)["sensor_pid"])


def _idle_spare(world: World) -> int:
    """The daemon's one child besides its sensor once no run is left (runner/daemon/spare.py)."""
    daemon_pid, sensor = world.daemon.proc.pid, _sensor_pid(world)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        others = _children(daemon_pid) - {sensor}
        if len(others) == 1 and not _status(world)["runs"]:
            return others.pop()
        time.sleep(0.1)
    raise AssertionError(f"no single idle spare worker: children {_children(daemon_pid)}, sensor {sensor}")


def test_a_spare_worker_waits_holding_nothing_but_its_socket_and_a_dead_one_is_replaced(world: World) -> None:
    user = world.member
    work = user.workspace(world.root, "work-spare")
    assert world.run(user, work, "spare-1", "/bin/true").returncode == 0
    spare = _idle_spare(world)
    fds = {int(fd): os.readlink(f"/proc/{spare}/fd/{fd}") for fd in os.listdir(f"/proc/{spare}/fd")}
    extra = {fd: target for fd, target in fds.items() if fd > 2}
    # no other run's descriptor, no BPF object, no listening socket: only the pair it waits on
    assert len(extra) == 1 and next(iter(extra.values())).startswith("socket:"), fds
    os.kill(spare, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while "daemon.spare_died" not in world.daemon.logs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _idle_spare(world) != spare
    proc = world.run(user, work, "spare-2", "/bin/true")
    assert proc.returncode == 0, proc.stderr + world.daemon.logs()[-2000:]


def test_a_daemon_run_refuses_compat_syscalls_unless_the_caller_allows_them(world: World) -> None:
    user = world.member
    work = user.workspace(world.root, "work-compat")
    exe = work / "compat_open"
    subprocess.run(["cc", "-O1", "-o", exe, Path(__file__).parent / "programs" / "seccomp" / "compat_open.c"],
                   check=True)
    exe.chmod(0o755)
    for run_id, extra in (("compat-refused", ()), ("compat-allowed", ("--allow-compat-syscalls",))):
        target = work / f"{run_id}.txt"
        proc = world.run(user, work, run_id, exe, target, work / f"{run_id}-x32.txt", extra=extra)
        assert proc.returncode == 0, proc.stderr + world.daemon.logs()[-3000:]
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        health = Archive(work / "out" / f"{run_id}.tar.gz").health
        if extra:
            assert seen["i386_open"] >= 0 and target.read_text() == "x"
            assert "s2_compat_syscalls: allowed=true traced=false" in health["notes"]
            assert health["cgroup_correlation"] == "partial"
        else:
            assert seen == {"i386_open": -38, "x32_open": -38} and not target.exists()
            assert "s3_syscalls_refused: compat_i386=1 compat_x32=1" in health["notes"]
