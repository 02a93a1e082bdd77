"""`observe`: one agent CLI run under the kernel monitor, written as black-box DecisionEvents.

Each of the nine catalog events is appended to `runs/<run_id>/events.jsonl`
the moment its step is done (blackbox.events.EventWriter), so a run cut
short leaves a valid prefix. The agent runs through the same session as
`assay-runner run` (cgroup, pid namespace, BPF monitor, spool, v0 archive
in the run directory); its stdout/stderr go straight into the artifact
files; the command log is built from the spool's exec records.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

from blackbox import catalog as C
from blackbox.capture import apply_mode, apply_mode_argv, count_secrets, sha256_ref
from blackbox.commandlog import build_commands, exit_dict
from blackbox.evaluate import Inputs, evaluate
from blackbox.events import Artifact, EventWriter, RunIdentity, rfc3339
from blackbox.scenario import Scenario
from runner import __version__
from runner.blackbox import steps
from runner.blackbox.workspace import Workspace, WorkspaceError, diff, prepare
from runner.capture.session import RunRequest, RunResult, execute
from runner.capture.spawn import Credentials
from runner.errors import RunnerError
from runner.logs import get_logger

log = get_logger("observe")
TERM_GRACE = 10.0
"""Seconds between the timeout's SIGTERM to the agent and the kill of its whole cgroup."""


@dataclass(frozen=True)
class ObserveRequest:
    """A checked `observe` invocation."""

    scenario: Scenario
    argv: list[str]
    exe: str
    runs_root: Path
    run_id: str
    environment: str
    workspace_source: Path | None = None
    user: Credentials | None = None
    isolate_net: bool = False
    ringbuf_pages: int = 64
    timeout: float | None = None
    """Seconds the agent may run before it is sent SIGTERM (then killed TERM_GRACE later)."""
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def run_dir(self) -> Path:
        return self.runs_root / self.run_id

    @property
    def agent_id(self) -> str:
        """The contract's agent id for Claude Code; other agents are named by their program."""
        name = os.path.basename(self.argv[0])
        return C.AGENT_ID if name == "claude" else name


@dataclass(frozen=True)
class ObserveResult:
    """What the command line reports: where the run is, the agent's exit code, the evaluation."""

    run_dir: Path
    exit_code: int
    statuses: dict[str, str]
    events: int
    findings: list[dict[str, str]]


class _Interrupts:
    """SIGTERM/SIGHUP outside the agent's run are noted, not fatal: the events get finished."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._old = {s: signal.signal(s, self._on) for s in (signal.SIGTERM, signal.SIGHUP)}

    def _on(self, signum: int, _frame: object) -> None:
        self.seen.append(signal.Signals(signum).name)

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


class _Deadline:
    """Ends an agent that outlives --timeout through the session's own signal path.

    The runner signals itself: the session forwards the first SIGTERM to the
    agent and answers a second one by killing the run's cgroup, exactly as
    for a user's SIGTERM, so a timeout is one more observed way to end.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.fired = False
        self._timers: list[threading.Timer] = []

    def start(self) -> None:
        if self.seconds is None:
            return
        self._timers = [threading.Timer(self.seconds, self._fire),
                        threading.Timer(self.seconds + TERM_GRACE, self._fire)]
        for t in self._timers:
            t.daemon = True
            t.start()

    def _fire(self) -> None:
        self.fired = True
        os.kill(os.getpid(), signal.SIGTERM)

    def cancel(self) -> None:
        for t in self._timers:
            t.cancel()


def identity(req: ObserveRequest) -> RunIdentity:
    sc, mode = req.scenario, req.scenario.capture_mode
    return RunIdentity(
        session={"session_id": sc.scenario_id, "run_id": req.run_id, "agent_id": req.agent_id,
                 "agent_version": "unknown", "environment": req.environment},
        request_id=steps.new_id(), user_request=apply_mode(sc.user_request, mode),
        provider="anthropic" if req.agent_id == C.AGENT_ID else "unknown", capture_mode=mode,
    )


def observe(req: ObserveRequest) -> ObserveResult:
    """Run the agent under observation and write every event; returns the agent's exit code."""
    run_dir = req.run_dir
    try:
        run_dir.mkdir(parents=True)
        (run_dir / "artifacts").mkdir()
    except FileExistsError:
        raise RunnerError(f"{run_dir} already exists: choose another --run-id") from None
    except OSError as exc:
        raise RunnerError(f"cannot create {run_dir}: {exc.strerror}; choose a writable --runs-root") from None
    interrupts = _Interrupts()
    writer = EventWriter(run_dir / "events.jsonl", identity(req))
    try:
        return _observe(req, writer, interrupts)
    finally:
        writer.close()
        interrupts.restore()


def _observe(req: ObserveRequest, writer: EventWriter, interrupts: _Interrupts) -> ObserveResult:
    sc, mode, run_dir = req.scenario, req.scenario.capture_mode, req.run_dir
    meta = steps.write_json(run_dir / "metadata.json",
                            steps.run_metadata(req.scenario, req.argv, __version__))
    root = writer.emit(C.RUN_STARTED, None, action_type="other",
                       summary=f"run_id={req.run_id} scenario_id={sc.scenario_id} runner=assay-runner "
                               f"{__version__} mode=black_box",
                       artifacts=(Artifact("metadata", "run metadata", "metadata.json", meta,
                                           {"run_dir": str(run_dir)}),))
    try:
        ws = prepare(run_dir, sc.workspace_mode, req.workspace_source,
                     (req.user.uid, req.user.gid) if req.user else None)
    except (WorkspaceError, OSError) as exc:
        raise RunnerError(f"cannot prepare the workspace: {exc}") from exc
    secrets_in_request = count_secrets([sc.user_request]) if mode != "full" else 0
    writer.emit(C.WORKSPACE_PREPARED, root, action_type="other",
                summary=f"workspace={sc.workspace_mode} files={ws.files} git_initialized_by_runner=true",
                constraints=tuple(c.as_event(mode) for c in sc.constraints),
                context=steps.request_context(sc, secrets_in_request),
                artifacts=(steps.workspace_artifact(ws, run_dir),))
    art = run_dir / "artifacts"
    outputs = (os.open(art / C.ARTIFACT_STDOUT, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644),
               os.open(art / C.ARTIFACT_STDERR, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
    try:  # read back through the runner's own descriptors: unlinking the files hides nothing
        deadline = _Deadline(req.timeout)
        try:
            result, invoked = _run_agent(req, writer, ws, root, outputs, deadline)
        finally:
            deadline.cancel()
        return _after_agent(req, writer, ws, root, result, invoked, interrupts, outputs, deadline)
    finally:
        for fd in outputs:
            os.close(fd)


def _run_agent(req: ObserveRequest, writer: EventWriter, ws: Workspace, root: str,
               outputs: tuple[int, int], deadline: _Deadline) -> tuple[RunResult, str]:
    """The agent under the session; agent_invoked is written right before it is let go."""
    mode = req.scenario.capture_mode
    verbose = "on" if "--verbose" in req.argv else "off"
    invoked: list[str] = []

    def on_start() -> None:
        shown = apply_mode_argv(req.argv, mode)
        invoked.append(writer.emit(
            C.AGENT_INVOKED, root, action_type="plan",
            summary=f"agent process started: verbose={verbose} cwd=workspace (under the kernel monitor)",
            artifacts=(Artifact("process", "agent invocation", None,
                                sha256_ref(json.dumps(shown).encode()),  # of argv as shown
                                {"cwd": "workspace", "argv": shown,
                                 "start_timestamp": rfc3339(writer.now()), "stdin": "/dev/null",
                                 "timeout_s": req.timeout}),),
        ))
        deadline.start()

    stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        result = execute(RunRequest(
            run_id=req.run_id, exe=req.exe, argv=req.argv, workdir=ws.root, out_dir=req.run_dir,
            ringbuf_pages=req.ringbuf_pages, env=req.env, user=req.user, isolate_net=req.isolate_net,
            stdio=(stdin, *outputs), on_start=on_start, forward_first_signal=True,
        ))
    finally:
        os.close(stdin)
    return result, invoked[0]


def _after_agent(req: ObserveRequest, writer: EventWriter, ws: Workspace, root: str, result: RunResult,
                 invoked: str, interrupts: _Interrupts, outputs: tuple[int, int],
                 deadline: _Deadline) -> ObserveResult:
    sc, mode, run_dir = req.scenario, req.scenario.capture_mode, req.run_dir
    kernel = steps.read_kernel(result.spool)
    agent_end = exit_dict(kernel.log.exits.get(1)) if kernel.log else None
    end_text = steps.describe_end(result.exit_code, agent_end)
    ending = {"exit_code": result.exit_code, "end": agent_end}  # hashed: how it ended, not when
    completed = writer.emit(
        C.AGENT_COMPLETED, invoked, action_type="other",
        summary=f"agent process ended: exit_code={result.exit_code} "
                f"duration_ms={kernel.duration_ms} ({end_text})",
        artifacts=(Artifact("process", "agent completion", None,
                            sha256_ref(json.dumps(ending, sort_keys=True).encode()),
                            {**ending, "duration_ms": kernel.duration_ms}),))
    for fd, name in zip(outputs, (C.ARTIFACT_STDOUT, C.ARTIFACT_STDERR), strict=True):
        if steps.restore_output(fd, run_dir / "artifacts" / name):
            log.warning("observe.output_restored", file=name, hint="the agent unlinked or replaced it")
    stdout = steps.read_output(outputs[0], C.ARTIFACT_STDOUT)
    stderr = steps.read_output(outputs[1], C.ARTIFACT_STDERR, keep=0)
    writer.emit(C.ARTIFACTS_CAPTURED, completed, action_type="other",
                summary="stdout and stderr persisted as artifacts (declared, non-normative)",
                output_raw="captured_as_artifact",
                artifacts=(steps.output_artifact("stdout_log", stdout),
                           steps.output_artifact("stderr_log", stderr)))
    facts = diff(ws, run_dir / "artifacts" / C.ARTIFACT_DIFF)
    writer.emit(C.FS_DIFF_CAPTURED, completed, action_type="edit",
                summary=steps.diff_summary(facts), artifacts=(steps.diff_artifact(facts),))
    commands = build_commands(kernel.log, str(ws.root)) if kernel.log else None
    if commands is not None:
        lines = [json.dumps(c.as_line(mode), ensure_ascii=False) + "\n" for c in commands]
        data = "".join(lines).encode("utf-8", "backslashreplace")
        (run_dir / "artifacts" / C.ARTIFACT_COMMANDS).write_bytes(data)
        art = steps.command_artifact(commands, data, kernel)
        tests = any(c.category == "test_runner" for c in commands)
        cmd_span = writer.emit(C.COMMANDS_OBSERVED, completed,
                               action_type="run_tests" if tests else "command",
                               summary=steps.commands_summary(commands, kernel), artifacts=(art,))
    else:
        cmd_span = writer.emit(C.COMMANDS_UNAVAILABLE, completed, action_type="other",
                               summary=f"command observation unavailable: reason=unknown ({kernel.error})")
    evaluation = evaluate(Inputs(sc.constraints, facts, stdout.head, stdout.hash, commands,
                                 kernel.error or "kernel exec records unreadable", stdout.size))
    statuses = {k: str(v["status"]) for k, v in evaluation.items()}
    text = " ".join(f"{k}={v}" for k, v in statuses.items())
    sources = ", ".join(n for n in (C.ARTIFACT_DIFF, C.ARTIFACT_COMMANDS if commands is not None else "",
                                    C.ARTIFACT_STDOUT) if n)
    writer.emit(C.EVALUATION_PERFORMED, cmd_span, action_type="other",
                summary=f"mechanical checks over {sources}: {text}",
                constraints=tuple(c.as_event(mode) for c in sc.constraints), evaluation=evaluation)
    marks = steps.finish_marks(end_text, interrupts.seen, req.timeout if deadline.fired else None)
    writer.emit(C.RUN_FINISHED, root, action_type="other",
                summary=f"{text} exit_code={result.exit_code} agent_end={end_text}{marks}",
                evaluation=evaluation, artifacts=(steps.archive_artifact(result, kernel),))
    log.info("observe.done", run_dir=str(run_dir), **statuses)
    # evaluate() types its sections' values as object; every section's "checks" is a list
    findings = [c for section in evaluation.values() for c in section["checks"]]  # type: ignore[attr-defined]
    return ObserveResult(run_dir, result.exit_code, statuses, len(writer.names), findings)
