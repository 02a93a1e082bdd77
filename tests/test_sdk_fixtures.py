"""The SDK fixture agents over a real SDK channel, without a kernel.

Each fixture runs as a child process holding the agent end of an
`SdkServer` channel (as `spawn` passes it), under the fixture policy's tool
decisions, in a scratch copy of the workspace. Nothing is enforced here (no
Landlock, no sock_addr): these check the reporting, the ids, the decisions
and the SDK pin; the kernel acceptance test checks enforcement.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from normalizer.correlate import correlate, decisions, policy_events
from normalizer.redact import Redactor
from normalizer.sdk import sdk_layer
from policy.load import host_variables, load_policy
from policy.model import resolve
from runner.capture.sdk_server import SdkServer

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "fixtures" / "agent"
sys.path.insert(0, str(AGENT))
from sdk_pin import SDK_NAME, SDK_VERSION  # noqa: E402

IDS = ["tc_001", "tc_002", "tc_003", "tc_004", "tc_005"]


def run_fixture(script: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list]:
    """Run a fixture agent in a workspace copy, served by a channel with the fixture's tool policy."""
    workspace = tmp_path / "workspace"
    shutil.copytree(AGENT / "workspace", workspace)
    policy = resolve(load_policy(AGENT / "policy.toml"), **host_variables(workspace))
    server = SdkServer(policy.tool_decision)
    server.start()
    try:
        env = {**os.environ, **server.env(), "OUTSIDE": str(tmp_path / "outside.txt")}
        env.pop("OPENAI_API_KEY", None)
        with subprocess.Popen(
            [sys.executable, "-B", str(AGENT / script)], cwd=workspace, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=[server.child_fd],
        ) as proc:
            server.close_child_end()
            out, err = proc.communicate(timeout=120)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert (workspace / "notes" / "out.txt").read_text().startswith("written by")
    assert not (tmp_path / "outside.txt").exists()  # written (nothing enforces here), then removed
    return done, server.take_messages()


def check_reported_calls(messages: list, sdk_name: str, sdk_version: str) -> None:
    """The five calls, reported with their ids, decided by the fixture policy, all correlated."""
    layer = sdk_layer(messages, "run_fixture", Redactor())
    assert [e.event_type for e in layer.sdk_events] == ["tool_call_started", "tool_call_completed"] * 5
    assert {(e.source, e.sdk_name, e.sdk_version) for e in layer.sdk_events} == {
        (sdk_name, sdk_name, sdk_version)}
    assert [(c.tool_call_id, c.tool, c.decision) for c in layer.tool_calls] == [
        ("tc_001", "read_file", "allow"),
        ("tc_002", "write_file", "allow"),
        ("tc_003", "write_file", "allow"),  # Landlock refuses it under the runner
        ("tc_004", "connect", "allow"),  # nothing listens; sock_addr refuses it under the runner
        ("tc_005", "shell", "deny"),
    ]
    assert [m.status for m in messages if m.event == "tool_call_finished"] == [
        "ok", "ok", "ok", "error", "denied"]
    decided = decisions(layer.tool_calls, [])
    assert sorted(f"{p.decision}:{p.tool}" for p in policy_events(decided, "run_fixture")) == [
        "allow:connect", "allow:read_file", "allow:write_file", "allow:write_file", "deny:shell",
    ]
    report = correlate(layer.tool_calls, decided, [], layer.sdk_events, 1, "run_fixture")
    assert (report.status, [b.tool_call_id for b in report.bindings]) == ("clean", IDS)


def test_dependency_free_fixture_reports_the_five_calls(tmp_path: Path) -> None:
    done, messages = run_fixture("sdk_agent.py", tmp_path)
    assert "tc_005 shell: denied:" in done.stdout
    assert "hello from shell" not in done.stdout  # the denied tool never acted
    check_reported_calls(messages, "assay-fixture-agent", "1")


def test_openai_agents_fixture_reports_the_sdk_tool_call_ids(tmp_path: Path) -> None:
    pytest.importorskip("agents", reason="the SDK fixture needs pip install -e '.[sdk]'")
    done, messages = run_fixture("openai_agent.py", tmp_path)
    assert done.stdout.splitlines()[0] == "tc_001 read_file: read 4 lines from README.md"
    assert "tc_005 shell: denied:" in done.stdout
    check_reported_calls(messages, SDK_NAME, SDK_VERSION)


def test_fixtures_run_outside_the_runner_with_a_no_op_channel(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    shutil.copytree(AGENT / "workspace", workspace)
    env = {k: v for k, v in os.environ.items() if k != "ASSAY_RUNNER_SDK_FD"}
    env["OUTSIDE"] = str(tmp_path / "outside.txt")
    done = subprocess.run([sys.executable, "-B", str(AGENT / "sdk_agent.py")], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "tc_005 shell: exit 0: hello from shell" in done.stdout  # nothing denies without the runner


def test_pyproject_pins_the_sdk_version_of_sdk_pin() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["sdk"] == [f"{SDK_NAME}=={SDK_VERSION}"]


def test_installed_sdk_is_the_pinned_one() -> None:
    pytest.importorskip("agents", reason="the SDK fixture needs pip install -e '.[sdk]'")
    from importlib.metadata import version

    assert version(SDK_NAME) == SDK_VERSION
