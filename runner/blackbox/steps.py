"""The pieces of each observe step: artifacts, summaries and the kernel facts they cite.

Summaries state observations only (counts, exit codes, names of artifacts);
check-events rejects wording that claims what the agent believed or wanted.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path

from blackbox import catalog as C
from blackbox.capture import apply_mode, apply_mode_argv, sha256_ref
from blackbox.commands import Command, categories_seen
from blackbox.diff import DiffFacts
from blackbox.evaluate import MAX_OUTPUT_BYTES
from blackbox.events import Artifact
from blackbox.scenario import Scenario
from normalizer.execlog import ExecLog, exec_log
from runner.blackbox.workspace import Workspace
from runner.capture.session import RunResult
from spool.format import SpoolError, read_spool

TOP_PATHS = 50
EXEC_HOOKS = ("exec", "exec_argv", "execve", "exit", "proc_exit")
COVERAGE = ("every execve/execveat of the agent's process tree (its cgroup), successful or failed, "
            "seen by kernel tracepoints; argv up to 32 entries of 4095 bytes; no PATH wrappers")


def new_id() -> str:
    return str(uuid.uuid4())


def write_json(path: Path, obj: object) -> str:
    """Write a small JSON artifact (sorted keys, newline) and return its hash."""
    data = (json.dumps(obj, ensure_ascii=False, sort_keys=True, indent=2) + "\n").encode()
    path.write_bytes(data)
    return sha256_ref(data)


def run_metadata(sc: Scenario, argv: list[str], version: str) -> dict[str, object]:
    """metadata.json: the run's set-up, nothing run-specific (ids and times are in the events)."""
    return {
        "runner": f"assay-runner {version}", "observability_mode": C.MODE, "schema_version": C.SCHEMA_VERSION,
        "scenario_id": sc.scenario_id, "workspace_mode": sc.workspace_mode, "capture_mode": sc.capture_mode,
        "agent_argv": apply_mode_argv(argv, sc.capture_mode),
        "parameters": {k: v for k, v in sorted(sc.parameters.items())},
    }


def request_context(sc: Scenario, secrets: int) -> dict[str, object]:
    """The rest of the scenario, shown by the capture mode like the request itself."""
    mode = sc.capture_mode
    return {
        "scenario_id": sc.scenario_id,
        "objective": apply_mode(sc.objective, mode) if sc.objective else "",
        "prohibited_actions": [apply_mode(p, mode) for p in sc.prohibited_actions],
        "success_criteria": [apply_mode(s, mode) for s in sc.success_criteria],
        "secrets_redacted": secrets,
    }


def workspace_artifact(ws: Workspace, run_dir: Path) -> Artifact:
    return Artifact("metadata", "workspace root (a git repository with one baseline commit)", "workspace/",
                    ws.tree_hash, {
                        "workspace_root": "workspace", "workspace_root_abs": str(ws.root),
                        "workspace_mode": ws.mode, "source": str(ws.source) if ws.source else None,
                        "files": ws.files, "git_initialized_by_runner": True,
                        "baseline_git_dir": os.path.relpath(ws.baseline, run_dir),
                    })


@dataclass(frozen=True)
class KernelFacts:
    """What the spool says about the agent: exec log, duration, losses."""

    log: ExecLog | None
    duration_ms: int | None
    exec_drops: int
    error: str = ""


def read_kernel(spool_path: Path) -> KernelFacts:
    """The exec log and timing from the run's raw spool (None log when it cannot be read)."""
    try:
        spool = read_spool(spool_path)
        log = exec_log(spool)
    except (SpoolError, OSError, ValueError) as exc:
        return KernelFacts(None, None, 0, f"spool unreadable: {exc}")
    times = {p.name: p.ts for p in spool.phases}
    duration = ((times["command_exited"] - times["run_started"]) // 1_000_000
                if {"run_started", "command_exited"} <= times.keys() else None)
    drops = sum(spool.trailer.drops.get(h, 0) for h in EXEC_HOOKS)
    return KernelFacts(log, duration, drops)


def describe_end(exit_code: int, end: dict[str, object] | None) -> str:
    """`exited:N`, `signaled:SIGNAME` (kernel view), or the runner's exit code."""
    if end and end.get("how") == "signaled":
        return f"signaled:{end.get('signal')}"
    if end and end.get("how") == "exited":
        return f"exited:{end.get('code')}"
    if exit_code > 128:
        try:
            return f"signaled:{signal.Signals(exit_code - 128).name}"
        except ValueError:
            pass
    return f"exited:{exit_code}"


@dataclass(frozen=True)
class OutputFile:
    """An output artifact read in chunks: its hash and size, and the head the evaluation reads."""

    name: str
    hash: str
    size: int
    lines: int
    head: bytes


def read_output(fd: int, name: str, keep: int = MAX_OUTPUT_BYTES) -> OutputFile:
    """Hash the whole file from offset 0, keep its first `keep` bytes: a flood cannot exhaust memory."""
    digest, size, lines, head = hashlib.sha256(), 0, 0, bytearray()
    while chunk := os.pread(fd, 1 << 20, size):
        digest.update(chunk)
        size += len(chunk)
        lines += chunk.count(b"\n")
        if len(head) < keep:
            head += chunk[: keep - len(head)]
    return OutputFile(name, f"sha256:{digest.hexdigest()}", size, lines, bytes(head))


def restore_output(fd: int, path: Path) -> bool:
    """Put the runner's copy back at `path` if the agent unlinked or replaced the file; True if it did."""
    try:
        if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            return False
        path.unlink()
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.restore")
    with open(tmp, "wb") as out:
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            out.write(chunk)
            offset += len(chunk)
    tmp.replace(path)
    return True


def output_artifact(kind: str, out: OutputFile) -> Artifact:
    return Artifact(kind, out.name, f"artifacts/{out.name}", out.hash, {
        "non_normative": True, "declared": True, "bytes": out.size, "lines": out.lines,
    })


def diff_summary(facts: DiffFacts) -> str:
    if not facts.available:
        return f"workspace diff unavailable: {facts.error}"
    empty = "" if facts.changes else " (empty diff)"
    return f"{len(facts.changes)} path(s) changed in the workspace{empty}"


def diff_artifact(facts: DiffFacts) -> Artifact:
    paths = [f"{c.status} {c.path}" for c in facts.changes]
    return Artifact("diff", C.ARTIFACT_DIFF, f"artifacts/{C.ARTIFACT_DIFF}", facts.hash, {
        "changed_paths": paths[:TOP_PATHS], "total_changed": len(paths), "method": "git_diff",
        "available": facts.available, "added_lines": len(facts.added),
    })


def command_artifact(commands: list[Command], data: bytes, kernel: KernelFacts) -> Artifact:
    ref = f"artifacts/{C.ARTIFACT_COMMANDS}"
    return Artifact("command_log", C.ARTIFACT_COMMANDS, ref, sha256_ref(data), {
        "observed_count": len(commands), "categories_seen": categories_seen(commands),
        "coverage": COVERAGE, "source": "kernel", "complete": kernel.exec_drops == 0,
        "exec_records_dropped": kernel.exec_drops,
        "failed_execs": sum(1 for c in commands if c.result == "error"),
    })


def commands_summary(commands: list[Command], kernel: KernelFacts) -> str:
    cats = ", ".join(f"{k}={v}" for k, v in categories_seen(commands).items())
    lost = f"; {kernel.exec_drops} exec record(s) lost" if kernel.exec_drops else ""
    return f"{len(commands)} command(s) observed by the kernel ({cats or 'none'}){lost}"


def finish_marks(end_text: str, interrupts: list[str], timed_out: float | None) -> str:
    """What marks a run that did not end normally: the agent's signal, a timeout, signals to the runner."""
    marks = ""
    if end_text.startswith("signaled:"):
        marks += f" agent_killed_by={end_text.split(':', 1)[1]}"
    if timed_out is not None:
        marks += f" agent_timed_out_after_s={timed_out:g}"
    if interrupts:
        marks += f" runner_interrupted_by={','.join(interrupts)}"
    return marks


def archive_artifact(result: RunResult, kernel: KernelFacts) -> Artifact:
    health = result.normalized.health
    return Artifact("metadata", "the runner's v0 evidence archive of the same run",
                    result.archive.name, sha256_ref(result.archive.read_bytes()), {
                        "spool": result.spool.name, "kernel_layer": health.kernel_layer,
                        "ringbuf_drops": health.ringbuf_drops,
                        "cgroup_correlation": health.cgroup_correlation,
                        "exec_records_dropped": kernel.exec_drops,
                    })
