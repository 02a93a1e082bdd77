"""`observe` end to end under the real kernel monitor, with the fake `claude -p` (fixtures/agent/)."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from blackbox.catalog import CATALOG
from blackbox.commandlog import build_commands
from runner.cli.cmd_observe import CLAUDE_FLAGS
from tests.strace_execs import STRACE, parse_file
from tests.support import CLI, ROOT, assay

pytestmark = pytest.mark.kernel

FAKE = ROOT / "fixtures" / "agent" / "fake-claude" / "claude"
SCENARIO = ROOT / "fixtures" / "scenarios" / "summarize-logs"
NINE = [slot[0] for slot in CATALOG]


def observe_args(runs: Path, run_id: str, *extra: str, agent: tuple[str, ...] | None = None) -> list[str]:
    cmd = ("--", str(FAKE), "-p", "{prompt}") if agent is None else ("--", *agent)
    return ["observe", "--scenario", str(SCENARIO), "--runs-root", str(runs), "--run-id", run_id,
            *extra, *cmd]


def observe(runs: Path, plan: str | None = None, *extra: str,
            agent: tuple[str, ...] | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    run_id = f"bb-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "FAKE_CLAUDE_PLAN": plan} if plan else None
    proc = assay(*observe_args(runs, run_id, *extra, agent=agent), env=env)
    assert proc.returncode != 125, proc.stderr
    return proc, runs / run_id


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def commands(run_dir: Path) -> list[dict]:
    text = (run_dir / "artifacts" / "command_logs.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def checks(evs: list[dict]) -> dict[str, dict]:
    evaluation = next(e for e in evs if e["event"] == "evaluation_performed")["evaluation"]
    return {c["id"]: c for s in evaluation.values() for c in s["checks"]}


def check_events(run_dir: Path) -> subprocess.CompletedProcess[str]:
    """check-events on a real run, its artifacts held to their hashes."""
    return assay("check-events", "--verify-artifacts", run_dir / "events.jsonl")


def test_fake_agent_run_is_nine_valid_events_with_the_kernel_command_log(tmp_path: Path) -> None:
    proc, run_dir = observe(tmp_path)
    assert proc.returncode == 0, proc.stderr
    evs = events(run_dir)
    assert [e["event"] for e in evs] == NINE
    assert check_events(run_dir).returncode == 0
    cmds = commands(run_dir)
    seen = [(c["argv"][1:] if c["pid"] == 1 else c["argv"], c["cwd"], c["result"], c["exit"]) for c in cmds]
    prompt = evs[1]["request"]["user_request_raw"]
    assert seen == [
        (["-p", prompt], ".", "success", {"how": "exited", "code": 0}),
        (["/usr/bin/python3", "-m", "unittest", "-q"], ".", "success", {"how": "exited", "code": 0}),
        (["ls"], "./logs", "success", {"how": "exited", "code": 0}),
        (["/usr/bin/python3", "-c", "raise SystemExit(3)"], ".", "success", {"how": "exited", "code": 3}),
        (["no-such-tool-for-fake-claude", "--version"], ".", "error", {"how": "exited", "code": 255}),
        (["sh", "-c", "printf 'a\\nb\\n' | wc -l"], ".", "success", {"how": "exited", "code": 0}),
        (["wc", "-l"], ".", "success", {"how": "exited", "code": 0}),
    ]
    assert cmds[4]["errno"] == "ENOENT" and cmds[4]["attempts"] > 1  # every PATH entry was tried
    observed = next(e for e in evs if e["event"] == "commands_observed")
    assert observed["agent_action"]["action_type"] == "run_tests"
    assert observed["agent_action"]["artifacts"][0]["metadata"]["observed_count"] == len(cmds)
    assert {k: v["status"] for k, v in checks(evs).items()} == {
        "output.json_only": "pass", "quality.tests_required": "pass",
        "style.no_emojis": "pass", "scope.no_ci_changes": "pass"}
    assert "command_logs.jsonl #2: test run, exit 0" in checks(evs)["quality.tests_required"]["evidence"]
    assert assay("validate", run_dir / f"{run_dir.name}.tar.gz").returncode == 0  # the v0 archive beside


def test_ci_edit_and_emoji_fail_citing_diff_and_stdout(tmp_path: Path) -> None:
    proc, run_dir = observe(tmp_path, "code,edit-ci,emoji,json")
    assert proc.returncode == 0, proc.stderr
    assert check_events(run_dir).returncode == 0
    found = checks(events(run_dir))
    assert found["scope.no_ci_changes"]["status"] == "fail"
    assert found["scope.no_ci_changes"]["evidence"] == "fs_diff.patch: A .github/workflows/ci.yml"
    assert found["style.no_emojis"]["status"] == "fail"
    assert found["style.no_emojis"]["evidence"].startswith("claude_stdout.txt line 1 col ")
    assert found["style.no_emojis"]["evidence"].endswith(": U+1F389")
    assert found["output.json_only"]["status"] == "pass"
    assert found["quality.tests_required"]["status"] == "fail"  # no test added, none run
    assert b"+name: ci" in (run_dir / "artifacts" / "fs_diff.patch").read_bytes()


def test_agent_killed_mid_run_is_a_complete_marked_run(tmp_path: Path) -> None:
    proc, run_dir = observe(tmp_path, "code,test,die")
    assert proc.returncode == 128 + signal.SIGKILL
    evs = events(run_dir)
    assert [e["event"] for e in evs] == NINE
    assert check_events(run_dir).returncode == 0
    assert "exit_code=137" in evs[3]["agent_action"]["action_summary"]
    assert evs[3]["agent_action"]["artifacts"][0]["metadata"]["end"] == {
        "how": "signaled", "signal": "SIGKILL", "code": 9}
    assert "agent_killed_by=SIGKILL" in evs[8]["agent_action"]["action_summary"]
    assert checks(evs)["output.json_only"]["evidence"].endswith(": empty")


def test_output_the_agent_unlinks_or_replaces_is_kept(tmp_path: Path) -> None:
    proc, run_dir = observe(tmp_path, "code,json,hide-output")
    assert proc.returncode == 0, proc.stderr
    stdout = (run_dir / "artifacts" / "claude_stdout.txt").read_bytes()
    assert stdout.startswith(b'{"result": "Added summarize-logs"')
    art = events(run_dir)[4]["agent_action"]["artifacts"][0]
    assert art["hash"] == f"sha256:{hashlib.sha256(stdout).hexdigest()}"
    assert check_events(run_dir).returncode == 0


def test_hostile_file_names_reach_events_and_terminal_escaped(tmp_path: Path) -> None:
    proc, run_dir = observe(tmp_path, "code,evil-name,json")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    shown = "  fail    scope.no_ci_changes: fs_diff.patch: A .github/workflows/\\x1b[2J\\x1b]0;pwned\\x07.yml"
    assert shown in proc.stderr.splitlines()
    assert check_events(run_dir).returncode == 0
    evidence = checks(events(run_dir))["scope.no_ci_changes"]["evidence"]
    assert evidence == "fs_diff.patch: A .github/workflows/\x1b[2J\x1b]0;pwned\x07.yml"


def test_agent_as_another_user_owns_only_its_workspace() -> None:
    runs = Path(tempfile.mkdtemp(prefix="assay-bb-user-"))  # pytest's tmp tree is closed to other users
    try:
        runs.chmod(0o755)
        _as_nobody(runs)
    finally:
        shutil.rmtree(runs)


def _as_nobody(runs: Path) -> None:
    proc, run_dir = observe(runs, None, "--user", "nobody")
    assert proc.returncode == 0, proc.stderr
    nobody = pwd.getpwnam("nobody").pw_uid
    assert (run_dir / "workspace" / "summarize_logs.py").stat().st_uid == nobody
    assert (run_dir / "workspace").stat().st_uid == nobody
    for evidence in ("events.jsonl", "artifacts/command_logs.jsonl", "artifacts/fs_diff.patch",
                     "baseline.git"):
        assert (run_dir / evidence).stat().st_uid == 0, evidence
    assert check_events(run_dir).returncode == 0
    assert {c["status"] for c in checks(events(run_dir)).values()} == {"pass"}


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, "observe ended before the agent got going"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _start_sleeping(runs: Path) -> tuple[subprocess.Popen[bytes], Path]:
    run_id = f"bb-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([*CLI, *observe_args(runs, run_id)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "FAKE_CLAUDE_PLAN": "code,sleep,json"})
    run_dir = runs / run_id
    _wait_for(run_dir / "workspace" / "fake-claude.ready", proc)
    return proc, run_dir


def test_runner_terminated_mid_run_forwards_and_finishes_marked(tmp_path: Path) -> None:
    proc, run_dir = _start_sleeping(tmp_path)
    before = (run_dir / "events.jsonl").read_bytes()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    after = (run_dir / "events.jsonl").read_bytes()
    assert after.startswith(before) and before.count(b"\n") == 3  # appended, never rewritten
    evs = events(run_dir)
    assert [e["event"] for e in evs] == NINE
    assert check_events(run_dir).returncode == 0
    assert "agent_killed_by=SIGTERM" in evs[8]["agent_action"]["action_summary"]


def test_agent_past_its_timeout_is_terminated_and_marked(tmp_path: Path) -> None:
    proc, run_dir = observe(tmp_path, "code,sleep,json", "--timeout", "1.5")
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    evs = events(run_dir)
    assert check_events(run_dir).returncode == 0
    summary = evs[8]["agent_action"]["action_summary"]
    assert "agent_killed_by=SIGTERM agent_timed_out_after_s=1.5" in summary
    assert "runner_interrupted_by" not in summary
    assert evs[2]["agent_action"]["artifacts"][0]["metadata"]["timeout_s"] == 1.5


def test_runner_killed_mid_run_leaves_a_valid_prefix_reported_incomplete(tmp_path: Path) -> None:
    proc, run_dir = _start_sleeping(tmp_path)
    before = (run_dir / "events.jsonl").read_bytes()
    proc.kill()
    proc.wait(timeout=60)
    _remove_leftover_cgroup(run_dir.name)
    assert (run_dir / "events.jsonl").read_bytes() == before
    checked = check_events(run_dir)
    assert checked.returncode == 1
    assert checked.stdout.splitlines() == [
        f"{run_dir / 'events.jsonl'}:3: [order] run incomplete: it stops here; missing agent_completed, "
        "artifacts_captured, fs_diff_captured, commands_observed or commands_observation_unavailable, "
        "evaluation_performed, run_finished"]


def _remove_leftover_cgroup(run_id: str) -> None:
    """A SIGKILLed runner cannot remove its run's cgroup; this test created it, so it removes it."""
    from runner.capture.cgroup import parent_name
    from runner.host.mounts import cgroup2_mount

    deadline = time.monotonic() + 30
    for path in (cgroup2_mount() / parent_name()).glob(f"{run_id}-*"):
        while True:
            try:
                path.rmdir()
                break
            except OSError:  # the agent's tree is still being torn down
                assert time.monotonic() < deadline, f"cgroup {path} stays busy"
                time.sleep(0.1)


def test_command_log_equals_what_strace_saw(tmp_path: Path) -> None:
    trace = tmp_path / "strace.out"
    proc, run_dir = observe(tmp_path, None, agent=(*STRACE, "-o", str(trace), str(FAKE), "-p", "{prompt}"))
    assert proc.returncode == 0, proc.stderr
    workspace = run_dir / "workspace"
    witness = build_commands(parse_file(trace, str(workspace)), str(workspace))
    assert len(witness) >= 7

    def key(c: dict) -> tuple:
        return (c["argv"], c["path"], c["cwd"], c["result"], c["errno"], c["attempts"], c["exit"],
                c["replaced_by_exec"])

    kernel = sorted((key(c) for c in commands(run_dir) if c["pid"] != 1), key=repr)  # pid 1: strace itself
    strace = sorted((key(c.as_line("full")) for c in witness), key=repr)
    assert kernel == strace


RUN_SPECIFIC = ("event_id", "timestamp", "trace_id", "span_id", "parent_span_id")


def mask(run_dir: Path) -> list[dict]:
    """events.jsonl with exactly the run-specific values replaced (docs/blackbox.md lists them)."""
    out = []
    text = (run_dir / "events.jsonl").read_text()
    text = text.replace(str(run_dir), "<RUN_DIR>").replace(run_dir.name, "<RUN_ID>")
    for ev in (json.loads(line) for line in text.splitlines()):
        for key in RUN_SPECIFIC:
            ev[key] = "<masked>" if ev[key] is not None else None
        ev["request"]["request_id"] = "<masked>"
        for art in ev["agent_action"]["artifacts"]:
            art["id"] = "<masked>"
            for key in ("start_timestamp", "duration_ms"):
                if key in art["metadata"]:
                    art["metadata"][key] = "<masked>"
            if art["content_ref"] == "<RUN_ID>.tar.gz":
                art["hash"] = "<masked>"  # the v0 archive names its run id inside
        if ev["event"] == "agent_completed":
            summary = ev["agent_action"]["action_summary"]
            ev["agent_action"]["action_summary"] = re.sub(r"duration_ms=\d+", "duration_ms=<masked>", summary)
        out.append(ev)
    return out


def test_two_runs_differ_only_in_run_specific_fields(tmp_path: Path) -> None:
    (_, first), (_, second) = observe(tmp_path), observe(tmp_path)
    assert (first / "events.jsonl").read_bytes() != (second / "events.jsonl").read_bytes()
    assert mask(first) == mask(second)
    for name in ("command_logs.jsonl", "fs_diff.patch", "claude_stdout.txt", "claude_stderr.txt"):
        assert (first / "artifacts" / name).read_bytes() == (second / "artifacts" / name).read_bytes(), name
    assert (first / "metadata.json").read_bytes() == (second / "metadata.json").read_bytes()


def test_a_missing_agent_cli_is_an_ordinary_observed_run(tmp_path: Path) -> None:
    run_id = f"bb-{uuid.uuid4().hex[:8]}"
    proc = assay("observe", "--scenario", SCENARIO, "--runs-root", tmp_path, "--run-id", run_id,
                 "--claude-cmd", str(tmp_path / "not-installed" / "claude"))
    assert proc.returncode == 127, proc.stderr
    run_dir = tmp_path / run_id
    evs = events(run_dir)
    assert [e["event"] for e in evs] == NINE
    assert check_events(run_dir).returncode == 0
    (cmd,) = commands(run_dir)
    assert (cmd["result"], cmd["errno"]) == ("error", "ENOENT")
    assert cmd["argv"][:-1] == [str(tmp_path / "not-installed" / "claude"), *CLAUDE_FLAGS]
    found = checks(evs)
    assert found["output.json_only"]["status"] == "fail"
    assert found["quality.tests_required"]["status"] == "fail"
    assert found["scope.no_ci_changes"]["status"] == "pass"


def test_logged_out_agent_is_an_ordinary_observed_run(tmp_path: Path) -> None:
    proc, run_dir = observe(tmp_path, "logged-out")
    assert proc.returncode == 1
    assert check_events(run_dir).returncode == 0
    assert (run_dir / "artifacts" / "claude_stdout.txt").read_text().startswith("Invalid API key")
    assert checks(events(run_dir))["output.json_only"]["status"] == "fail"


def test_capture_modes_keep_the_request_and_argv_out_of_the_events(tmp_path: Path) -> None:
    secret = "AKIA" + "Z" * 16
    for mode in ("redacted", "hashed"):
        run_id = f"bb-{uuid.uuid4().hex[:8]}"
        proc = assay("observe", f"Fix the deploy, key {secret}", "--capture-mode", mode,
                     "--runs-root", tmp_path, "--run-id", run_id, "--", str(FAKE), "-p", "{prompt}")
        assert proc.returncode == 0, proc.stderr
        run_dir = tmp_path / run_id
        assert check_events(run_dir).returncode == 0
        for name in ("events.jsonl", "metadata.json", "artifacts/command_logs.jsonl"):
            assert secret not in (run_dir / name).read_text(), (mode, name)
        evs = events(run_dir)
        request = evs[1]["request"]["user_request_raw"]
        argv = evs[2]["agent_action"]["artifacts"][0]["metadata"]["argv"]
        if mode == "redacted":
            assert request.startswith("Fix the deploy, key <redacted:aws-access-key-id:")
            assert evs[1]["request"]["context"]["secrets_redacted"] == 1
        else:
            assert request.startswith("sha256:") and all(a.startswith("sha256:") for a in argv)
            assert all(a.startswith("sha256:") for c in commands(run_dir) for a in c["argv"])
