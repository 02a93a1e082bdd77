"""The daemon's shared sensor on the real kernel: drops stay with their run; losing it is said.

Drops through the daemon's shared ring are the flooding run's own, never a
neighbour's: one daemon with a small shared ring (16 pages) serves two runs at once. Run
B waits quietly; run A floods the ring with opens while the sensor (the
ring's only reader) is stopped, so the kernel cannot write most of A's
records. A's archive must say so (its own drops); B, live the whole time,
then opens its marker and must come out clean: no drops, none borrowed
from A, none of A's records.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from runner.capture.sources import CONSUMER_ENV
from tests.daemon_support import CLI, daemon
from tests.support import Archive

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
WAITER = """
import os, sys, time
ready, go, target, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
open(ready, "w").close()
while not os.path.exists(go):   # stat and sleep: nothing the monitor records
    time.sleep(0.01)
for _ in range(count):
    os.close(os.open(target, os.O_RDONLY | os.O_CREAT, 0o600))
open(target + ".done", "w").close()
"""


def _wait_for(path: Path, client: subprocess.Popen | None = None, timeout: float = 60) -> None:
    """Wait for `path`; a client that ends first fails the test with what it said."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if client is not None and client.poll() is not None:
            out, err = client.communicate()
            raise AssertionError(f"the run ended (exit {client.returncode}) before {path} appeared:\n"
                                 f"{out}{err}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _sensor_pid(logs: str) -> int:
    for line in logs.splitlines():
        if '"daemon.sensor_loaded"' in line:
            return int(json.loads(line)["sensor_pid"])
    raise AssertionError(f"no sensor_pid in the daemon's log: {logs[-2000:]}")


def _consumer(logs: str) -> str:
    for line in logs.splitlines():
        if '"sensor.ring_consumer"' in line:
            return str(json.loads(line)["consumer"])
    raise AssertionError(f"the sensor never said which ring reader it has: {logs[-2000:]}")


@pytest.mark.parametrize("consumer", ["c", "python"])
def test_a_flooding_run_drops_only_its_own_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    consumer: str) -> None:
    """Both ring readers: the C consumer (built by `make setup`) and the per-record Python observer."""
    if consumer == "python":
        monkeypatch.setenv(CONSUMER_ENV, "python")
    else:
        monkeypatch.delenv(CONSUMER_ENV, raising=False)
    root = tmp_path / "d"
    root.mkdir()
    with daemon(root, "[sensor]\nringbuf_pages = 16\n") as service:
        out = tmp_path / "out"
        runs = {}
        for tag, count in (("b", 20), ("a", 5000)):
            d = tmp_path / tag
            d.mkdir()
            argv = [*CLI, "run", "--socket", str(service.socket), "--out", str(out),
                    "--run-id", f"drops-{tag}", "--", PY, "-c", WAITER,
                    str(d / "ready"), str(d / "go"), str(d / f"target-{tag}"), str(count)]
            runs[tag] = (d, subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True))
        for d, _ in runs.values():
            _wait_for(d / "ready")
        sensor = _sensor_pid(service.logs())
        assert _consumer(service.logs()) == consumer
        (a_dir, a_client), (b_dir, b_client) = runs["a"], runs["b"]
        os.kill(sensor, signal.SIGSTOP)  # the ring's only reader stops: A's flood cannot all fit
        try:
            (a_dir / "go").touch()
            _wait_for(a_dir / "target-a.done")
        finally:
            os.kill(sensor, signal.SIGCONT)
        _, a_err = a_client.communicate(timeout=300)
        assert a_client.returncode == 0, a_err + service.logs()[-3000:]
        (b_dir / "go").touch()
        _, b_err = b_client.communicate(timeout=300)
        assert b_client.returncode == 0, b_err + service.logs()[-3000:]

    a, b = Archive(out / "drops-a.tar.gz"), Archive(out / "drops-b.tar.gz")
    assert a.health["ringbuf_drops"] > 0 and a.health["kernel_layer"] == "partial_ringbuf_drops"
    assert any(n.startswith("s2_kernel_drops: ") and "open=" in n for n in a.health["notes"])
    assert b.health["ringbuf_drops"] == 0 and b.health["kernel_layer"] == "complete"
    assert not any("drops" in n and "ringbuf_drops=0" not in n for n in b.health["notes"])
    b_opened = b.values("openat")
    assert sum(str(b_dir / "target-b") in v for v in b_opened) >= 1
    assert not any("target-a" in v for v in b_opened)
    assert not any("target-b" in v for v in a.values("openat"))


def test_losing_the_sensor_fails_the_run_loudly_and_stops_the_daemon(tmp_path: Path) -> None:
    """No archive may claim a complete kernel layer once the ring's reader is gone."""
    root = tmp_path / "d"
    root.mkdir()
    with daemon(root, "") as service:
        d = tmp_path / "w"
        d.mkdir()
        client = subprocess.Popen([*CLI, "run", "--socket", str(service.socket),
                                   "--out", str(tmp_path / "out"), "--run-id", "orphaned", "--", PY, "-c",
                                   WAITER, str(d / "ready"), str(d / "go"), str(d / "target"), "1"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        _wait_for(d / "ready")
        os.kill(_sensor_pid(service.logs()), signal.SIGKILL)
        _, err = client.communicate(timeout=120)
        assert client.returncode == 125, err
        assert "sensor process is gone" in err and len(err.strip().splitlines()) == 1, err
        assert service.proc.wait(timeout=120) == 0  # it stopped by itself
        assert '"daemon.sensor_died"' in service.logs()
    assert not (tmp_path / "out" / "orphaned.tar.gz").exists()


CONNECTER = """
import errno, os, socket, sys, time
ready, go, out = sys.argv[1], sys.argv[2], sys.argv[3]
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
results = []
for port in map(int, sys.argv[4:]):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("127.0.0.1", port))
            results.append("ok")
        except OSError as exc:
            results.append(errno.errorcode[exc.errno])
with open(out, "w") as f:
    f.write(" ".join(results))
"""


def test_each_run_gets_its_own_network_rules_from_the_one_linked_program(tmp_path: Path) -> None:
    """Two overlapping runs, one with a deny-by-default policy, one without: the rules are per run."""
    allowed, other = 41900, 41901
    policy = tmp_path / "net.toml"
    policy.write_text('version = 1\nname = "one-port"\n[network]\ndefault = "deny"\n'
                      f'allow = [{{ cidr = "127.0.0.1", ports = {allowed}, protocol = "udp" }}]\n')
    root = tmp_path / "d"
    root.mkdir()
    with daemon(root, "") as service:
        clients = {}
        for tag, extra in (("strict", ["--policy", str(policy)]), ("open", [])):
            d = tmp_path / tag
            d.mkdir()
            clients[tag] = (d, subprocess.Popen(
                [*CLI, "run", "--socket", str(service.socket), "--out", str(tmp_path / "out"),
                 "--run-id", f"net-{tag}", *extra, "--", PY, "-c", CONNECTER, str(d / "ready"), str(d / "go"),
                 str(d / "result"), str(allowed), str(other)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for d, client in clients.values():
            _wait_for(d / "ready", client)
        for d, _ in clients.values():
            (d / "go").touch()
        for _, client in clients.values():
            _, err = client.communicate(timeout=300)
            assert client.returncode == 0, err + service.logs()[-3000:]
    strict, open_ = clients["strict"][0], clients["open"][0]
    assert (strict / "result").read_text() == "ok EPERM"
    assert (open_ / "result").read_text() == "ok ok"
    blocked = Archive(tmp_path / "out" / "net-strict.tar.gz").values("connect_blocked")
    assert blocked == [f"127.0.0.1:{other}"]
    assert Archive(tmp_path / "out" / "net-open.tar.gz").values("connect_blocked") == []
