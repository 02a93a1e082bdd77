"""The probe matrix against the real kernel under the runner's presets and bubblewrap.

The whole matrix runs inside a network namespace this module creates (`ip
netns`), joined to a second namespace by a veth pair; the only non-loopback
peer any probe reaches is the listener this module starts on the far end.
Nothing else on the host is contacted. HOME points at a tmp_path home with a
`.ssh` directory, so the secrets probe does not depend on the host's.

Each run mode is one `probe` invocation, as a user would type it; the
expected outcome table is written out in full below and asserted exactly.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from probe_harness import PROBES_DIR, ROOT
from probe_harness.contracts import load_contracts
from tests import fencerunner_rules

pytestmark = pytest.mark.kernel

BIN = ROOT / ".venv" / "bin"
NEAR, FAR, PORT = "10.213.7.1", "10.213.7.2", 4242
BWRAP = "bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --bind {workspace} {workspace}"

S, D = "success", "denied"
# probe: baseline, read-only, workspace-write, danger-full-access, bubblewrap (BWRAP above)
EXPECTED = {
    "fs_outside_workspace_write": (S, D, D, S, D),
    "fs_symlink_escape_write": (S, D, D, S, D),
    "fs_system_root_read": (S, S, S, S, S),
    "fs_tmp_write": (S, D, S, S, S),
    "fs_user_ssh_list": (S, S, S, S, S),
    "fs_workspace_list": (S, S, S, S, S),
    "fs_workspace_write_create": (S, D, S, S, S),
    "ipc_unix_socket": (S, D, S, S, S),
    "net_loopback_tcp": (S, D, D, S, S),
    "net_outbound_tcp": (S, D, D, S, S),
    "net_udp_datagram": (S, D, D, S, S),
    "proc_exec_workspace_script": (S, D, S, S, S),
    "proc_fork_children": (S, S, S, S, S),
    "proc_self_comm_write": (S, D, D, S, S),
    "sysctl_proc_sys_read": (S, S, S, S, S),
}
MODES = ("baseline", "read-only", "workspace-write", "danger-full-access", "external")
# errno of each denial: Landlock refuses files with EACCES, the cgroup programs
# refuse sockets with EPERM, bubblewrap's read-only bind mounts give EROFS.
DENIAL_ERRNO = {"fs": "EACCES", "proc": "EACCES", "ipc": "EACCES", "net": "EPERM"}
# Runner-mode records the kernel layer cannot speak to: successful opens under
# /proc are telemetry by contract (their denials are checked).
NOT_CHECKED = {
    ("read-only", "sysctl_proc_sys_read"),
    ("workspace-write", "sysctl_proc_sys_read"),
    ("danger-full-access", "sysctl_proc_sys_read"),
    ("danger-full-access", "proc_self_comm_write"),
}


@dataclass
class Netns:
    near: str
    peer: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def netns() -> Iterator[Netns]:
    """Two fresh namespaces joined by a veth pair, a TCP listener on the far side."""
    tag = secrets.token_hex(3)
    near, far = f"pbn-{tag}", f"pbf-{tag}"
    _ip("netns", "add", near)
    _ip("netns", "add", far)
    server = None
    try:
        _ip(
            "link",
            "add",
            f"pbn{tag}",
            "netns",
            near,
            "type",
            "veth",
            "peer",
            "name",
            f"pbf{tag}",
            "netns",
            far,
        )
        for ns, dev, addr in ((near, f"pbn{tag}", NEAR), (far, f"pbf{tag}", FAR)):
            _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        code = (
            "import socket\n"
            f"s = socket.create_server(({FAR!r}, {PORT}))\n"
            "while True:\n"
            "    s.accept()[0].close()\n"
        )
        server = subprocess.Popen(["ip", "netns", "exec", far, sys.executable, "-c", code])
        for _ in range(100):
            probe = subprocess.run(
                ["ip", "netns", "exec", far, "ss", "-ltnH"], capture_output=True, text=True
            )
            if f"{FAR}:{PORT}" in probe.stdout:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the server in {far} never listened on {FAR}:{PORT}")
        yield Netns(near, f"{FAR}:{PORT}")
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "del", near], check=False)
        subprocess.run(["ip", "netns", "del", far], check=False)


@dataclass
class Matrix:
    records: list[dict]
    stdout: str
    stderr: str
    returncode: int
    out: Path


def run_matrix(tmp: Path, netns: Netns, *extra: str) -> Matrix:
    """`probe --matrix` inside the near namespace, in a fresh workspace under `tmp`."""
    ws, out, home = tmp / "ws", tmp / "out", tmp / "ws" / "home"
    (home / ".ssh").mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "FENCE_NET_PEER": netns.peer}
    cmd = ["nsenter", f"--net=/run/netns/{netns.near}", str(BIN / "probe"), "--matrix",
           "--workspace", str(ws), "--out", str(out), *extra]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    records = [json.loads(line) for line in done.stdout.splitlines()]
    return Matrix(records, done.stdout, done.stderr, done.returncode, out)


@pytest.fixture(scope="module")
def runner_matrix(netns: Netns, tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    return run_matrix(tmp_path_factory.mktemp("matrix"), netns)


@pytest.fixture(scope="module")
def bwrap_matrix(netns: Netns, tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: run make setup (scripts/setup.sh installs it)")
    return run_matrix(
        tmp_path_factory.mktemp("bwrap"), netns, "--modes", "baseline,external", "--wrapper", BWRAP
    )


def _table(records: list[dict]) -> dict[tuple[str, str], dict]:
    table = {}
    for r in records:
        key = (r["probe"]["id"], r["run"]["mode"])
        assert key not in table, f"two records for {key}"
        table[key] = r
    return table


def _check_outcomes(records: list[dict], modes: tuple[str, ...]) -> None:
    table = _table(records)
    assert {p.stem for p in PROBES_DIR.glob("*.sh")} == set(EXPECTED)
    assert set(table) == {(p, m) for p in EXPECTED for m in modes}
    wrong = []
    for probe, outcomes in EXPECTED.items():
        for mode in modes:
            r = table[(probe, mode)]
            want = outcomes[MODES.index(mode)]
            got = r["result"]["observed_result"]
            if got != want:
                wrong.append(f"{probe} {mode}: {got} ({r['result']['message']}), expected {want}")
            elif got == "denied":
                errno = "EROFS" if mode == "external" else DENIAL_ERRNO[r["operation"]["category"]]
                if r["result"]["errno"] != errno:
                    wrong.append(f"{probe} {mode}: errno {r['result']['errno']}, expected {errno}")
            elif r["result"]["errno"] is not None:
                wrong.append(f"{probe} {mode}: success with errno {r['result']['errno']}")
    assert wrong == []


def test_matrix_records_all_validate(runner_matrix: Matrix) -> None:
    assert runner_matrix.returncode == 0, runner_matrix.stderr
    contracts = load_contracts()
    assert len(runner_matrix.records) == len(EXPECTED) * 4
    upstream = fencerunner_rules.load(ROOT / "catalogs" / "cfbo-v1.json")
    for record in runner_matrix.records:
        mode = record["run"]["mode"]
        assert contracts.problems(record) == []
        assert record["schema_key"] == ("cfbo-v1" if mode == "baseline" else "cfbo-linux-v1")
        if mode == "baseline":
            upstream.validate(record)  # fencerunner's own rules for its key
    listened = subprocess.run([BIN / "probe", "--listen"], input=runner_matrix.stdout, capture_output=True,
                              text=True, check=False)  # fmt: skip
    assert listened.returncode == 0
    assert listened.stdout.splitlines()[-1].startswith(
        f"{len(EXPECTED) * 4} records: {len(EXPECTED) * 4} valid"
    )


def test_matrix_outcome_table(runner_matrix: Matrix) -> None:
    _check_outcomes(runner_matrix.records, MODES[:4])
    for r in runner_matrix.records:
        mode = r["run"]["mode"]
        assert r["stack"]["sandbox_mode"] == (None if mode == "baseline" else mode)
        assert r["run"]["workspace_root"] == str(runner_matrix.out.parent / "ws")


def test_corroboration_agrees_on_every_record(runner_matrix: Matrix) -> None:
    report = json.loads((runner_matrix.out / "corroboration.json").read_text())
    assert [run["mode"] for run in report["runs"]] == list(MODES[1:4])
    assert all(run["archive"] and run["kernel_lines"] > 0 for run in report["runs"])
    entries = {(e["mode"], e["probe"]): e for e in report["entries"]}
    assert len(entries) == len(EXPECTED) * 3
    disagreements = [f"{k}: {e['reason']}" for k, e in entries.items() if e["verdict"] == "disagree"]
    assert disagreements == []
    assert {k for k, e in entries.items() if e["verdict"] == "not_checked"} == NOT_CHECKED
    # a denied write is matched by a blocked line for its target, a successful connect by a connect line
    outside = entries[("workspace-write", "fs_outside_workspace_write")]
    assert (outside["basis"], len(outside["kernel_blocked_lines"])) == ("line", 1)
    connect = entries[("danger-full-access", "net_outbound_tcp")]
    assert (connect["target"], connect["basis"], len(connect["kernel_success_lines"])) == (
        f"{FAR}:{PORT}", "line", 1)  # fmt: skip
    blocked = entries[("read-only", "net_outbound_tcp")]
    assert len(blocked["kernel_blocked_lines"]) == 1
    assert report["counts"] == {"agree": len(EXPECTED) * 3 - len(NOT_CHECKED), "disagree": 0,
                                "not_checked": len(NOT_CHECKED)}  # fmt: skip


def test_bubblewrap_matrix_matches_what_bubblewrap_enforces(bwrap_matrix: Matrix) -> None:
    assert bwrap_matrix.returncode == 0, bwrap_matrix.stderr
    contracts = load_contracts()
    for record in bwrap_matrix.records:
        assert contracts.problems(record) == []
    _check_outcomes(bwrap_matrix.records, ("baseline", "external"))
    external = [r for r in bwrap_matrix.records if r["run"]["mode"] == "external"]
    assert {r["stack"]["sandbox_mode"] for r in external} == {None}
    assert not (bwrap_matrix.out / "corroboration.json").exists()


def test_bubblewrap_without_network_is_an_error_not_a_denial(netns: Netns, tmp_path: Path) -> None:
    """`--unshare-net` leaves only loopback: the peer is unreachable (ENETUNREACH), which the
    errno table records as `error`, since the same errno comes from a host without a route."""
    env = {**os.environ, "FENCE_NET_PEER": netns.peer}
    cmd = ["nsenter", f"--net=/run/netns/{netns.near}", str(BIN / "probe"), "--target", "--modes", "external",
           "--probe", "net_outbound_tcp", "--probe", "net_loopback_tcp", "--workspace", str(tmp_path),
           "--out", str(tmp_path / "out"),
           "--wrapper", f"{BWRAP} --unshare-net"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    got = {
        r["probe"]["id"]: (r["result"]["observed_result"], r["result"]["errno"])
        for r in map(json.loads, done.stdout.splitlines())
    }
    assert got == {"net_outbound_tcp": ("error", "ENETUNREACH"), "net_loopback_tcp": ("success", None)}
