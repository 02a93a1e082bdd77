"""Against the real kernel: policy enforcement, the SDK layer and tool-call correlation.

Every run goes through the real CLI (`assay-runner run` / `determinism`) as a
user would start it. Each test proves one thing the acceptance requires; runs are
shared between assertions through module-scoped fixtures. What the tests
prove, and how to run them, is in docs/acceptance.md.
"""

from __future__ import annotations

import errno
import json
import os
import runpy
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spool.format import Spool, read_spool
from tests.recount import raw_counts
from tests.support import ROOT, Archive, assay, run_cgroups, run_observed, runner_env, unique_run_id

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
VENV_PY = ROOT / ".venv" / "bin" / "python"
AGENT = ROOT / "fixtures" / "agent"
PROGRAMS = ROOT / "tests" / "programs" / "policy"
OUTSIDE = "/tmp/assay-fixture-outside.txt"  # fixture_tools.DEFAULT_OUTSIDE
CALL_IDS = ["tc_001", "tc_002", "tc_003", "tc_004", "tc_005"]
FIXTURE_DECISIONS = ["allow:read_file", "allow:write_file", "deny:connect", "deny:shell", "deny:write_file"]
"""`{decision}:{tool}` of the fixture's policy lines: tc_003 (write_file) and tc_004 (connect) are
denied by the kernel blocks inside them, tc_002's write_file is allowed."""
def agent_env() -> dict[str, str]:
    """The test's environment for fixture runs: the fixture's default outside path, no API key."""
    env = runner_env()
    env.pop("OUTSIDE", None)
    env.pop("OPENAI_API_KEY", None)
    return env


def write_policy(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def stdout_json(proc: subprocess.CompletedProcess[str]) -> dict:
    """The JSON object a test program printed last on stdout."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def error_lines(stderr: str) -> list[str]:
    """Stderr without the structured (JSON) log lines: what a person reads."""
    return [line for line in stderr.splitlines() if line and not line.startswith("{")]


# -- the SDK fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of fixtures/agent/workspace at a fixed path, reused by every fixture run."""
    ws = tmp_path_factory.mktemp("agent") / "workspace"
    shutil.copytree(AGENT / "workspace", ws, ignore=shutil.ignore_patterns("notes"))
    return ws


def reset(ws: Path) -> None:
    """What a fixture run leaves behind, removed so the next run starts the same."""
    shutil.rmtree(ws / "notes", ignore_errors=True)


@dataclass(frozen=True)
class FixtureRun:
    archive: Archive
    spool: Spool
    proc: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def determinism(workspace: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[subprocess.CompletedProcess[str], list[FixtureRun]]:
    """`assay-runner determinism --runs 3` of the dependency-free fixture under its policy."""
    reset(workspace)
    out = tmp_path_factory.mktemp("determinism")
    proc = assay("determinism", "--runs", "3", "--out", out, "--run-id", "sdk-fixture",
                 "--policy", AGENT / "policy.toml", "--workdir", workspace,
                 "--", PY, "-B", AGENT / "sdk_agent.py", env=agent_env())
    runs = [FixtureRun(Archive(out / f"run-{i}" / "sdk-fixture.tar.gz"),
                       read_spool(out / f"run-{i}" / "sdk-fixture.spool"), proc)
            for i in (1, 2, 3)]
    return proc, runs


def check_acceptance(run: FixtureRun, workspace: Path) -> None:
    """What the acceptance requires of a fixture run (shared by both fixtures)."""
    archive = run.archive
    health = archive.health
    assert (health["policy_layer"], health["sdk_layer"]) == ("present", "self_reported")
    assert (health["kernel_layer"], health["ringbuf_drops"], health["cgroup_correlation"]) == (
        "complete", 0, "clean")

    report = archive.json("correlation-report.json")
    assert (report["status"], report["ambiguities"]) == ("clean", [])
    assert [b["tool_call_id"] for b in report["bindings"]] == CALL_IDS
    assert [b["policy_decision"] for b in report["bindings"]] == ["allow", "allow", "deny", "deny", "deny"]
    assert all(b["window"] == {"start": f"tool_call_started:{b['tool_call_id']}",
                               "end": f"tool_call_completed:{b['tool_call_id']}"}
               for b in report["bindings"])
    policy = archive.lines("layers/policy.ndjson")
    assert [(p["tool_call_id"], p["decision"]) for p in policy] == [
        (b["tool_call_id"], b["policy_decision"]) for b in report["bindings"]]
    reported = {b["tool_call_id"]: b["kernel_event_count"] for b in report["bindings"]}
    assert reported == raw_counts(run.spool)
    assert reported["tc_005"] == 0  # denied by the tool policy: the shell never ran
    assert all(reported[i] >= 1 for i in CALL_IDS[:4])

    (blocked_file,) = [e for e in archive.kernel if e["kind"] == "file_blocked"]
    assert blocked_file["value"] == OUTSIDE
    assert (blocked_file["access_mode"], blocked_file["status"], blocked_file["return_value"]) == (
        "write", "error", -13)
    assert archive.values("connect_blocked") == ["127.0.0.1:9999"]
    assert "127.0.0.1:9999" not in archive.values("connect")  # one denial, one line
    written = [e for e in archive.kernel if e["kind"] == "openat"
               and e["value"] == str(workspace / "notes" / "out.txt")]
    assert [(e["access_mode"], e.get("status"), e.get("return_value")) for e in written] == [
        ("write", None, None)]  # success: no status, no fd number

    assert archive.surface["policy_decisions"] == FIXTURE_DECISIONS
    assert archive.surface["mcp_tools"] == ["connect", "read_file", "shell", "write_file"]
    assert {p["tool_call_id"]: p["source"] for p in policy} == {
        "tc_001": "assay-runner://policy/tools", "tc_002": "assay-runner://policy/tools",
        "tc_003": "assay-runner://policy/filesystem", "tc_004": "assay-runner://policy/network",
        "tc_005": "assay-runner://policy/tools"}

    check = assay("validate", archive.path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_fixture_acceptance(determinism, workspace: Path) -> None:
    proc, runs = determinism
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_acceptance(runs[0], workspace)
    sdk = runs[0].archive.lines("layers/sdk.ndjson")
    assert {(e["sdk_name"], e["sdk_version"]) for e in sdk} == {("assay-fixture-agent", "1")}
    assert runs[0].proc.returncode == 0


def test_fixture_counts_identical_across_runs(determinism) -> None:
    _, runs = determinism
    counts = [raw_counts(r.spool) for r in runs]
    reported = [{b["tool_call_id"]: b["kernel_event_count"]
                 for b in r.archive.json("correlation-report.json")["bindings"]} for r in runs]
    assert counts[0] == counts[1] == counts[2] == reported[0] == reported[1] == reported[2]


def test_three_fixture_runs_are_byte_identical(determinism) -> None:
    proc, runs = determinism
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = runs[0].archive
    assert {"layers/policy.ndjson", "layers/sdk.ndjson", "correlation-report.json"} <= first.members.keys()
    assert first.members["layers/policy.ndjson"] and first.members["layers/sdk.ndjson"]
    for other in runs[1:]:
        assert other.archive.members == first.members
        assert other.archive.path.read_bytes() == first.path.read_bytes()


def sdk_importable() -> str | None:
    """Why the OpenAI Agents SDK fixture cannot run here, or None when it can."""
    if not VENV_PY.exists():
        return f"{VENV_PY} missing (run scripts/setup.sh)"
    probe = subprocess.run([VENV_PY, "-c", "import agents"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return "the OpenAI Agents SDK is not importable: .venv/bin/pip install -e '.[sdk]'"
    return None


@pytest.fixture(scope="module")
def openai_run(workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> FixtureRun:
    """The OpenAI Agents SDK fixture under the runner with the fixture policy."""
    reason = sdk_importable()
    if reason is not None:
        pytest.skip(reason)  # a failure on CI (conftest.py)
    reset(workspace)
    out = tmp_path_factory.mktemp("openai")
    proc = assay("run", "--out", out, "--run-id", "openai-fixture", "--policy", AGENT / "policy.toml",
                 "--workdir", workspace, "--", VENV_PY, "-B", AGENT / "openai_agent.py",
                 env=agent_env())
    assert proc.returncode == 0, proc.stderr
    return FixtureRun(Archive(out / "openai-fixture.tar.gz"), read_spool(out / "openai-fixture.spool"), proc)


def test_openai_agents_fixture_acceptance(openai_run: FixtureRun, workspace: Path) -> None:
    check_acceptance(openai_run, workspace)
    pin = runpy.run_path(str(AGENT / "sdk_pin.py"))
    sdk = openai_run.archive.lines("layers/sdk.ndjson")
    assert [e["event_type"] for e in sdk[:2]] == ["tool_call_started", "tool_call_completed"]
    assert {e["source"] for e in sdk} == {"openai-agents"}
    assert {(e["sdk_name"], e["sdk_version"]) for e in sdk} == {("openai-agents", pin["SDK_VERSION"])}
    assert pin["SDK_NAME"] == "openai-agents"
    lines = openai_run.proc.stdout.splitlines()
    assert "tc_005 shell: denied: tool 'shell' denied by policy rule 'tools.deny'" in lines


# -- file policy against DAC, as an unprivileged user ----------------------------------------


@dataclass(frozen=True)
class DacRun:
    archive: Archive
    spool: Spool
    seen: dict[str, int]
    outside_root_only: str
    outside_world_readable: str
    inside_root_only: str


@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DacRun]:
    """`--user nobody` reads three files under a policy whose read trees exclude `outside/`.

    pytest's own temp dirs are 0700 root: nobody could not reach them. The
    files live under a fresh 0755 directory in /tmp instead.
    """
    base = Path(tempfile.mkdtemp(prefix="assay-dac-", dir="/tmp"))
    try:
        base.chmod(0o755)
        files = {}
        for name, mode in (("outside/root-only", 0o600), ("outside/world-readable", 0o644),
                           ("inside/root-only", 0o600)):
            path = base / name
            path.parent.mkdir(mode=0o755, exist_ok=True)
            path.parent.chmod(0o755)
            path.write_text("secret\n")
            path.chmod(mode)
            files[name] = str(path)
        policy = write_policy(tmp_path_factory.mktemp("dac-policy") / "policy.toml", f"""\
version = 1
[filesystem]
read = ["/usr", "/etc", "{PROGRAMS}", "{base / 'inside'}"]
write = ["/dev/null"]
""")
        out = tmp_path_factory.mktemp("dac-out")
        proc = run_observed(out, "dac", PY, "-I", "-B", PROGRAMS / "open_files.py", *files.values(),
                            workdir=base, extra=("--policy", str(policy), "--user", "nobody"))
        assert proc.returncode == 0, proc.stderr
        # the verdicts change stage A, which the live pass ran without them (runner/capture/live.py)
        assert '"normalized_by": "offline_dac"' in proc.stderr
        yield DacRun(Archive(out / "dac.tar.gz"), read_spool(out / "dac.spool"), stdout_json(proc),
                     files["outside/root-only"], files["outside/world-readable"], files["inside/root-only"])
    finally:
        shutil.rmtree(base)


def _opens(archive: Archive, path: str) -> list[dict]:
    return [e for e in archive.kernel if e["value"] == path and e["kind"] in ("openat", "file_blocked")]


def test_root_only_file_outside_read_trees_is_not_a_policy_block(unprivileged: DacRun) -> None:
    """DAC refuses first: the EACCES is the file's mode, not the policy's doing."""
    run = unprivileged
    path = run.outside_root_only
    assert run.seen[path] == errno.EACCES
    (event,) = _opens(run.archive, path)
    assert (event["kind"], event["status"], event["return_value"]) == ("openat", "error", -13)
    assert path not in run.archive.values("file_blocked")
    assert run.spool.dac[f"read:{path}"] is False  # the runner's DAC verdict, checked as nobody


def test_root_only_file_inside_read_trees_is_a_plain_failed_open(unprivileged: DacRun) -> None:
    """Control: the policy allows it, DAC refuses it, nothing is attributed to the policy."""
    run = unprivileged
    path = run.inside_root_only
    assert run.seen[path] == errno.EACCES
    (event,) = _opens(run.archive, path)
    assert (event["kind"], event["status"], event["return_value"]) == ("openat", "error", -13)
    assert f"read:{path}" not in run.spool.dac  # no question: the policy does not refuse it


def test_world_readable_file_outside_read_trees_is_blocked(unprivileged: DacRun) -> None:
    """DAC would allow, Landlock denied: a `file_blocked` line (no tool call: no policy line)."""
    run = unprivileged
    path = run.outside_world_readable
    assert run.seen[path] == errno.EACCES
    (event,) = _opens(run.archive, path)
    assert (event["kind"], event["access_mode"], event["return_value"]) == ("file_blocked", "read", -13)
    assert run.spool.dac[f"read:{path}"] is True
    assert path in run.archive.surface["filesystem_paths"]
    assert (run.archive.surface["policy_decisions"], run.archive.members["layers/policy.ndjson"]) == ([], b"")
    assert run.archive.health["policy_layer"] == "absent"  # Assay: present iff policy lines


# -- network policy: UDP and IPv6 -------------------------------------------------------------

NET_POLICY = """\
version = 1
[network]
default = "deny"
allow = [
  { cidr = "127.0.0.1", ports = 5353, protocol = "udp" },
  { cidr = "::1", ports = 11, protocol = "tcp" },
]
"""


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, dict[str, int]]:
    work = tmp_path_factory.mktemp("net")
    policy = write_policy(work / "policy.toml", NET_POLICY)
    proc = run_observed(work, "net", PY, "-B", PROGRAMS / "net_policy.py", workdir=work,
                        extra=("--policy", str(policy)))
    assert proc.returncode == 0, proc.stderr
    return Archive(work / "net.tar.gz"), stdout_json(proc)


def test_udp_to_disallowed_peer_is_blocked_and_recorded(network) -> None:
    archive, seen = network
    assert seen["udp_sendto_denied"] == errno.EPERM
    assert "127.0.0.2:5354" in archive.values("connect_blocked")
    assert "127.0.0.2:5354" not in archive.values("event_6")  # one denial, one line
    assert "127.0.0.2:5354" in archive.surface["network_endpoints"]


def test_udp_to_allowed_peer_goes_through(network) -> None:
    archive, seen = network
    assert (seen["udp_sendto_allowed"], seen["udp_sendmsg_allowed"]) == (0, 0)
    assert archive.values("event_6") == ["127.0.0.1:5353"]
    assert archive.values("event_7") == ["127.0.0.1:5353"]
    assert "127.0.0.1:5353" in archive.surface["network_endpoints"]  # datagram peers are endpoints


def test_ipv6_connect_to_disallowed_peer_is_blocked_and_recorded(network) -> None:
    archive, seen = network
    assert seen["tcp6_denied"] == errno.EPERM
    assert seen["tcp6_allowed"] == errno.ECONNREFUSED  # allowed: refused by the peer, not the policy
    assert archive.values("connect_blocked") == ["127.0.0.2:5354", "[::1]:10"]
    assert archive.values("connect") == ["[::1]:11"]
    assert (archive.surface["policy_decisions"], archive.health["policy_layer"]) == ([], "absent")


# -- SDK channel: a tool call without an id ---------------------------------------------------


def test_tool_call_without_id_makes_correlation_partial(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "policy.toml", 'version = 1\n[tools]\ndefault = "allow"\n')
    proc = run_observed(tmp_path, "noid", PY, "-B", PROGRAMS / "tool_without_id.py", workdir=tmp_path,
                        extra=("--policy", str(policy)))
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "noid.tar.gz")
    report = archive.json("correlation-report.json")
    assert report["status"] == "partial"
    assert report["ambiguities"] == ["tool_call_without_id:read_file"]
    assert [b["tool_call_id"] for b in report["bindings"]] == ["tc_with_id"]  # the other call still binds
    started = [e for e in archive.lines("layers/sdk.ndjson") if e["event_type"] == "tool_call_started"]
    assert [e["tool_call_id"] for e in started] == ["tc_with_id"]  # Assay needs an id on the line
    assert archive.health["sdk_layer"] == "self_reported"


# -- refusing to run --------------------------------------------------------------------------


def test_malformed_policy_exits_125_naming_file_line_and_field(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "bad.toml", """\
version = 1

[network]
default = "deny"
allow = [
  { cidr = "127.0.0.1", ports = "0-99999" },
]
""")
    out = tmp_path / "out"
    marker = tmp_path / "ran"
    proc = assay("run", "--out", out, "--run-id", "bad", "--policy", policy, "--workdir", tmp_path,
                 "--", "sh", "-c", f"touch {marker}")
    assert proc.returncode == 125
    assert error_lines(proc.stderr) == [
        f"assay-runner: error: {policy}:6: field network.allow[0].ports: "
        'expected "N" or "N-M" with 1 <= N <= M <= 65535, got "0-99999"'
    ]
    assert not out.exists()
    assert not marker.exists()


def test_landlock_abi_too_old_fails_closed(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "writes.toml",
                          'version = 1\n[filesystem]\nread = ["/"]\nwrite = ["/dev/null"]\n')
    out = tmp_path / "out"
    marker = tmp_path / "ran"
    run_id = unique_run_id("abi")
    proc = assay("run", "--out", out, "--run-id", run_id, "--policy", policy, "--workdir", tmp_path,
                 "--", "sh", "-c", f"touch {marker}",
                 env={**os.environ, "ASSAY_RUNNER_LANDLOCK_ABI_MAX": "2"})
    assert proc.returncode == 125
    (line,) = error_lines(proc.stderr)
    assert line.startswith("assay-runner: error: ") and "Landlock ABI 2" in line, line
    assert not marker.exists()  # the command never ran
    assert not out.exists() or list(out.iterdir()) == []
    assert run_cgroups(run_id) == []


# -- presets and --net isolated ---------------------------------------------------------------

WRITE_IN_WORKSPACE = "echo x > out.txt"


def test_sandbox_read_only_blocks_a_workspace_write(tmp_path: Path) -> None:
    proc = run_observed(tmp_path, "ro", "sh", "-c", WRITE_IN_WORKSPACE, workdir=tmp_path,
                        extra=("--sandbox", "read-only"))
    assert proc.returncode != 0
    target = str(tmp_path / "out.txt")
    assert not Path(target).exists()
    archive = Archive(tmp_path / "ro.tar.gz")
    (event,) = _opens(archive, target)
    assert (event["kind"], event["access_mode"], event["return_value"]) == ("file_blocked", "write", -13)
    assert (archive.surface["policy_decisions"], archive.health["policy_layer"]) == ([], "absent")


def test_sandbox_danger_full_access_does_not_block(tmp_path: Path) -> None:
    proc = run_observed(tmp_path, "full", "sh", "-c", WRITE_IN_WORKSPACE, workdir=tmp_path,
                        extra=("--sandbox", "danger-full-access"))
    assert proc.returncode == 0, proc.stderr
    target = str(tmp_path / "out.txt")
    assert Path(target).read_text() == "x\n"
    archive = Archive(tmp_path / "full.tar.gz")
    (event,) = _opens(archive, target)
    assert (event["kind"], event["access_mode"], event.get("status")) == ("openat", "write", None)
    assert archive.surface["policy_decisions"] == []
    assert archive.health["policy_layer"] == "absent"  # a policy, but no tool decisions
    assert Counter(e["kind"] for e in archive.kernel)["file_blocked"] == 0


def test_net_isolated_reaches_only_loopback(tmp_path: Path) -> None:
    proc = run_observed(tmp_path, "iso", PY, "-B", PROGRAMS / "net_isolated.py", workdir=tmp_path,
                        extra=("--net", "isolated"))
    assert proc.returncode == 0, proc.stderr
    assert stdout_json(proc) == {"remote": errno.ENETUNREACH, "loopback": 0}
    archive = Archive(tmp_path / "iso.tar.gz")
    assert archive.values("connect") == ["192.0.2.1:80", "127.0.0.1:8080"]  # the failed attempt too
    assert archive.values("connect_blocked") == []  # no policy: unreachable, not denied
