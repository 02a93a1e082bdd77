"""Run one gate: prerequisites, three observed runs, validation, expectations.

The runs are `assay-runner determinism --runs 3` in a child process, so a
gate exercises exactly what a user runs and the byte-identity and health
verdicts are the determinism command's own (runner/evidence/compare.py).
Everything the gate produces lands in `OUT/gates/NAME/`:

    gate.log                 the determinism output, then one line per check
    determinism-report.json  the determinism command's report
    run-N/ID.tar.gz, .spool  each run's archive and raw spool
    expectations.toml        the expectations the gate was checked against
    report.html              `assay-runner report` of run 1, for a reviewer of the pack
    result.json              the gate's status and every problem

The workspace copy the command runs in lives in `OUT/.work/NAME/` (not part
of the pack: the runs' archives record what happened in it).

The probe-matrix gate runs `probe --matrix` three times instead and has a
rule of its own (probe_gate.py); its `run-N/` hold records.ndjson,
probe.log, corroboration.json and each batch's archive and spool, and
`outcomes.json` the three outcome tables.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal, TextIO

import msgspec

from runner.acceptance import probe_gate
from runner.acceptance.expect import Expectations, check
from runner.acceptance.gates import REPO, Gate
from runner.errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_RUNNER_ERROR, RunnerError
from runner.evidence.archive import load_members, sha256_ref, write_atomic
from runner.evidence.compare import RunInput, build_report, render_text
from runner.evidence.validate import archive_problems
from runner.review.html import render
from runner.review.load import load_view

Status = Literal["passed", "failed", "could_not_run"]
RESULT = "result.json"
LOG = "gate.log"
EXPECTATIONS = "expectations.toml"
REPORT = "report.html"
RUNS = 3
EXIT_COULD_NOT_RUN = 3


class GateResult(msgspec.Struct):
    """`gates/NAME/result.json`."""

    gate: str
    title: str
    status: Status
    reason: str
    """One line: why it did not pass (empty when it passed)."""
    problems: list[str]
    runs: int
    determinism_exit: int | None
    command: list[str]


class Interrupted(Exception):
    """Ctrl-C reached the gate's runs: stop, do not start another gate."""


def _say(log: TextIO, line: str) -> None:
    log.write(line + "\n")
    log.flush()
    print(f"assay-runner: acceptance: {line}", file=sys.stderr, flush=True)


def _workspace(gate: Gate, work: Path) -> Path:
    """A fresh copy of the gate's fixture workspace, without what fixture runs write into it."""
    ws = work / gate.name / "workspace"
    shutil.rmtree(ws.parent, ignore_errors=True)
    shutil.copytree(REPO / gate.workspace, ws, symlinks=True,
                    ignore=shutil.ignore_patterns("notes", "__pycache__", "hidden-write-output.txt"))
    return ws


def determinism_argv(gate: Gate, gate_dir: Path, workspace: Path, python: str) -> list[str]:
    """The `assay-runner determinism` command line of a gate."""
    argv = [python, "-m", "runner.cli.main", "determinism", "--runs", str(RUNS), "--run-id", gate.run_id,
            "--out", str(gate_dir), "--workdir", str(workspace), "--force"]
    if gate.policy:
        argv += ["--policy", str(REPO / gate.expand(gate.policy, python))]
    return [*argv, "--", *(gate.expand(part, python) for part in gate.command)]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "OUTSIDE"}  # the fixtures' default outside path


def _observe_runs(gate: Gate, gate_dir: Path, root: Path, python: str, log: TextIO) -> int:
    """Three `observe` runs of the gate's agent, compared like `determinism` compares runs.

    Every run writes ROOT/RUN_ID/ (the same path each time, so the archives
    can be byte-identical), which then becomes gate_dir/run-N/ without the
    agent's workspace and git baseline (the diff is in artifacts/). The
    verdict and report are the determinism command's own (build_report).
    """
    assert gate.scenario is not None
    argv = [python, "-m", "runner.cli.main", "observe", "--scenario", str(REPO / gate.scenario),
            "--runs-root", str(root), "--run-id", gate.run_id, "--",
            *(gate.expand(part, python) for part in gate.command)]
    inputs = []
    for number in range(1, RUNS + 1):
        shutil.rmtree(root, ignore_errors=True)
        _say(log, f"observe run {number}/{RUNS}: {' '.join(argv)}")
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=_env(), check=False).returncode
        if code == EXIT_INTERRUPTED:
            raise Interrupted
        if code == EXIT_RUNNER_ERROR:
            return code
        run_dir = gate_dir / f"run-{number}"
        shutil.move(root / gate.run_id, run_dir)
        for scratch in ("workspace", "baseline.git"):
            shutil.rmtree(run_dir / scratch, ignore_errors=True)
        archive = run_dir / f"{gate.run_id}.tar.gz"
        inputs.append(RunInput(str(archive), sha256_ref(archive.read_bytes()), code, load_members(archive)))
    report = build_report(gate.run_id, argv, str(root / gate.run_id / "workspace"), inputs, False)
    write_atomic(gate_dir / "determinism-report.json",
                 msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")
    _say(log, render_text(report))
    return 0 if report.passed else EXIT_CHECK_FAILED


def _check_events(gate_dir: Path, python: str, log: TextIO) -> list[str]:
    """`check-events --verify-artifacts` on every run's events.jsonl."""
    problems = []
    for number in range(1, RUNS + 1):
        events = gate_dir / f"run-{number}" / "events.jsonl"
        done = subprocess.run([python, "-m", "runner.cli.main", "check-events", "--verify-artifacts",
                               str(events)], capture_output=True, text=True, check=False)
        _say(log, f"check-events run-{number}: {'OK' if done.returncode == 0 else 'FAIL'}")
        log.write(done.stdout + done.stderr)
        if done.returncode != 0:
            problems.append(f"run-{number}: check-events rejects events.jsonl (see gate.log)")
    return problems


def _check_runs(gate: Gate, gate_dir: Path, exp: Expectations, workspace: Path, python: str,
                log: TextIO) -> list[str]:
    """Validate every run's archive; check the first run's evidence against the expectations."""
    problems: list[str] = []
    for number in range(1, RUNS + 1):
        archive = gate_dir / f"run-{number}" / f"{gate.run_id}.tar.gz"
        found = archive_problems(archive)
        problems += [f"run-{number}: {p}" for p in found]
        _say(log, f"validate run-{number}: {'INVALID' if found else 'OK'} {archive.name}")
    first = gate_dir / "run-1" / f"{gate.run_id}.tar.gz"
    if not first.exists():
        return [*problems, "run-1: no archive to check the expectations against"]
    try:
        view = load_view(first, first.with_name(f"{gate.run_id}.spool"))
    except RunnerError as exc:
        return [*problems, f"run-1: cannot review: {exc}"]
    write_atomic(gate_dir / REPORT, render(view).encode())
    subst = {"$WORKSPACE": str(workspace), "$PYTHON": python, "$REPO": str(REPO)}
    found = check(exp, view, subst)
    _say(log, f"expectations: {'as expected' if not found else f'{len(found)} difference(s)'}")
    return problems + [f"expectations: {p}" for p in found]


def run_gate(gate: Gate, out: Path, exp: Expectations, expectations: Path,
             host_problem: str | None) -> GateResult:
    """Run one gate into `out/gates/NAME/`; its result (also written as result.json).

    `exp` is the already checked content of the file `expectations`.
    """
    gate_dir = out / "gates" / gate.name
    shutil.rmtree(gate_dir, ignore_errors=True)
    gate_dir.mkdir(parents=True)
    python = sys.executable
    command = [gate.expand(part, python) for part in gate.command]
    with open(gate_dir / LOG, "w", encoding="utf-8") as log:
        _say(log, f"gate {gate.name}: {gate.title}")
        result = GateResult(gate.name, gate.title, "could_not_run", "", [], RUNS, None, command)
        missing = [host_problem] if host_problem else []
        if not gate.fixture.is_dir():
            missing.append(f"{gate.fixture} not found: gates run from an assay-runner checkout")
        missing += [m for r in gate.requires if (m := r.missing(python))]
        if missing:
            result.reason = "; ".join(missing)
            _say(log, f"COULD NOT RUN: gate {gate.name}: {result.reason}")
            return _finish(gate_dir, result)
        shutil.copyfile(expectations, gate_dir / EXPECTATIONS)
        if gate.probe_matrix:
            return _finish(gate_dir, _probe_matrix(gate, gate_dir, out, exp, result, python, log))
        if gate.scenario:
            workspace = out / ".work" / gate.name / gate.run_id / "workspace"
            code = _observe_runs(gate, gate_dir, workspace.parent.parent, python, log)
        else:
            workspace = _workspace(gate, out / ".work")
            argv = determinism_argv(gate, gate_dir, workspace, python)
            _say(log, f"running: {' '.join(argv)}")
            code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=_env(), check=False).returncode
        result.determinism_exit = code
        if code == EXIT_INTERRUPTED:
            raise Interrupted
        if code not in (0, EXIT_CHECK_FAILED):
            result.status, result.reason = "failed", f"the runs exited {code} (see {LOG})"
            _say(log, f"FAIL: gate {gate.name}: {result.reason}")
            return _finish(gate_dir, result)
        result.problems = ([] if code == 0 else ["determinism: runs not byte-identical, exit codes "
                                                 "differ, or health not passing (determinism-report.json)"])
        result.problems += _check_runs(gate, gate_dir, exp, workspace, python, log)
        if gate.scenario:
            result.problems += _check_events(gate_dir, python, log)
        _conclude(gate, result, log)
    return _finish(gate_dir, result)


def _probe_matrix(gate: Gate, gate_dir: Path, out: Path, exp: Expectations, result: GateResult,
                  python: str, log: TextIO) -> GateResult:
    """The probe-matrix gate: its own rule (probe_gate.py), not byte identity."""
    if exp.probe_matrix is None:
        result.problems = ["expectations: no [probe_matrix] table for this gate"]
    else:
        code, result.problems = probe_gate.run_gate_runs(gate_dir, out / ".work" / gate.name, RUNS, python,
                                                         exp.probe_matrix, log)
        result.determinism_exit = code
        if code == EXIT_INTERRUPTED:
            raise Interrupted
    return _conclude(gate, result, log)


def _conclude(gate: Gate, result: GateResult, log: TextIO) -> GateResult:
    """Status and reason from the problems found, logged."""
    result.status = "failed" if result.problems else "passed"
    result.reason = f"{len(result.problems)} problem(s), first: {result.problems[0]}" \
        if result.problems else ""
    for problem in result.problems:
        _say(log, f"problem: {problem}")
    _say(log, f"PASS: gate {gate.name}" if result.status == "passed"
         else f"FAIL: gate {gate.name}: {result.reason}")
    return result


def exit_code(results: list[GateResult]) -> int:
    """1 when a gate failed, else 3 when one could not run, else 0 (cmd_acceptance documents them)."""
    if any(r.status == "failed" for r in results):
        return EXIT_CHECK_FAILED
    return EXIT_COULD_NOT_RUN if any(r.status == "could_not_run" for r in results) else 0


def _finish(gate_dir: Path, result: GateResult) -> GateResult:
    write_atomic(gate_dir / RESULT, msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
    return result
