"""The probe-matrix gate: three `probe --matrix` runs, judged by their outcome tables.

Probe records are not byte-identical across runs by design (targets carry
random suffixes, loopback probes use ephemeral ports, the batches' run ids
are random: docs/probes.md), so this gate cannot use the byte-identity rule
of the other gates. Its rule (docs/acceptance.md, "The probe-matrix gate"):

1. each run of `probe --matrix` exits 0 (no probe failed, the kernel
   disagreed with no record);
2. each run has exactly one record per probe and mode, and every record
   validates against the contracts (checked again here: nothing that ran in a
   sandbox is trusted);
3. each run's runner archives validate (the contract and the Assay
   conformance rules, `validate_path`);
4. each run is corroborated by its own kernel evidence: the corroboration is
   recomputed here from the run's records and archives (not read from the
   harness's report), no entry disagrees, and the entries that are not
   checked are exactly the expected ones;
5. the three runs' outcome tables (probe x mode -> `success`,
   `denied:<errno>` or `error`) are identical, and equal the expected table.

`check_run` and `compare_runs` are pure over files, so `acceptance verify`
applies the same rule to a pack offline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, TextIO

from probe_harness import corroborate
from probe_harness.contracts import ContractError, load_contracts
from probe_harness.execute import RUNNER_OUT, all_probes
from runner.acceptance.expect import ProbeMatrixExpectation
from runner.acceptance.gates import console_script
from runner.errors import EXIT_INTERRUPTED
from runner.evidence.archive import write_atomic
from runner.evidence.validate import archive_problems

RECORDS = "records.ndjson"
PROBE_LOG = "probe.log"
CORROBORATION = "corroboration.json"
OUTCOMES = "outcomes.json"
_BATCH_ARCHIVE = re.compile(r"^probe-(?P<mode>[a-z-]+)-[0-9a-f]{8}\.tar\.gz$")

Table = dict[str, dict[str, str]]
"""probe id -> mode -> outcome (`success`, `denied:<errno>`, `error`, `partial`)."""


def outcome(record: dict[str, Any]) -> str:
    """A record's cell in the outcome table: the result, and the errno of a denial."""
    result = record["result"]
    status = result["observed_result"]
    return f"{status}:{result['errno']}" if status == "denied" else status


def _read_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"{path.name}: unreadable ({exc})"]
    records, problems = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path.name}:{number}: not JSON ({exc})")
            continue
        records.append(record)
    return records, problems


def check_run(run_dir: Path, exp: ProbeMatrixExpectation) -> tuple[Table, list[str]]:
    """One run's outcome table and every way it breaks points 2-4 of the rule.

    `run_dir` holds RECORDS and the runner archives `probe-<mode>-<hex>.tar.gz`
    of the run's sandboxed batches.
    """
    name = run_dir.name
    records, unreadable = _read_records(run_dir / RECORDS)
    problems = [f"{name}: {p}" for p in unreadable]
    try:
        contracts = load_contracts()
    except ContractError as exc:
        return {}, [f"{name}: contracts unusable: {exc}"]
    table: Table = {}
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for number, record in enumerate(records, start=1):
        bad = contracts.problems(record)
        if bad:
            problems.append(f"{name}: {RECORDS}:{number}: invalid record: {'; '.join(bad)}")
            continue
        probe, mode = record["probe"]["id"], record["run"]["mode"]
        if mode in table.setdefault(probe, {}):
            problems.append(f"{name}: {probe} in {mode}: more than one record")
        table[probe][mode] = outcome(record)
        by_mode.setdefault(mode, []).append(record)
    probes = sorted(p.stem for p in all_probes())
    problems += [f"{name}: {probe} in {mode}: no record" for probe in probes for mode in exp.modes
                 if mode not in table.get(probe, {})]
    problems += [f"{name}: {probe}: a record but no such probe in probes/" for probe in table
                 if probe not in probes]
    archives: dict[str, Path] = {}
    for archive in sorted(run_dir.glob("*.tar.gz")):
        m = _BATCH_ARCHIVE.match(archive.name)
        if not m or m["mode"] in archives:
            problems.append(f"{name}: {archive.name}: not the one archive of a batch")
            continue
        archives[m["mode"]] = archive
        problems += [f"{name}: {archive.name}: {p}" for p in archive_problems(archive)]
    runner_modes = [m for m in exp.modes if m != "baseline"]
    problems += [f"{name}: no runner archive for mode {m}" for m in runner_modes if m not in archives]
    batches = [(m, archives[m].name.removesuffix(".tar.gz"), archives[m], by_mode.get(m, []))
               for m in runner_modes if m in archives]
    try:
        entries = corroborate.report(batches)["entries"]
    except corroborate.CorroborationError as exc:
        return table, [*problems, f"{name}: corroboration: {exc}"]
    not_checked = []
    for e in entries:
        where = f"{e['probe']} in {e['mode']}"
        if e["verdict"] == "disagree":
            problems.append(f"{name}: {where}: the kernel disagrees: {e['reason']}")
        elif e["verdict"] == "not_checked":
            not_checked.append(f"{e['mode']}/{e['probe']}")
    # a mode without its archive is reported above; its entries are not expected either
    want = sorted(w for w in set(exp.not_checked) if w.split("/", 1)[0] in archives)
    problems += [f"{name}: {w}: expected not_checked, but the kernel evidence was judged"
                 for w in want if w not in not_checked]
    problems += [f"{name}: {g}: not corroborated by kernel evidence" for g in sorted(not_checked)
                 if g not in want]
    return table, problems


def compare_runs(tables: dict[str, Table], exp: ProbeMatrixExpectation) -> list[str]:
    """Point 5: every run's table equals the first's, and the first equals the expected table."""
    problems = []
    names = sorted(tables)
    first = tables[names[0]] if names else {}
    for name in names[1:]:
        for probe in sorted(first.keys() | tables[name].keys()):
            for mode in exp.modes:
                a, b = first.get(probe, {}).get(mode), tables[name].get(probe, {}).get(mode)
                if a != b:
                    problems.append(f"{probe} in {mode}: {names[0]} {a or 'no record'}, "
                                    f"{name} {b or 'no record'}")
    for probe in sorted(exp.outcomes.keys() | first.keys()):
        want = exp.outcomes.get(probe)
        if want is None:
            problems.append(f"{probe}: in the runs but not in the expected table")
            continue
        for mode, cell in zip(exp.modes, want, strict=True):
            got = first.get(probe, {}).get(mode)
            if got != cell:
                problems.append(f"{probe} in {mode}: {got or 'no record'}, expected {cell}")
    return problems


def _env(home: Path) -> dict[str, str]:
    """The matrix's environment: a HOME with an empty .ssh, and no outbound peer.

    Without FENCE_NET_PEER the outbound probe contacts nothing and records
    `error` (the harness never picks a host); the gate's table says so.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("FENCE_NET_PEER", "FENCE_WORKSPACE_ROOT")}
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home)}


def run_matrix(run_dir: Path, work: Path, python: str, exp: ProbeMatrixExpectation, log: TextIO) -> int:
    """One `probe --matrix` into `run_dir` (records, its stderr, and its batches' archives and spools).

    The runner writes the batches' archives to its own default --out
    (probe_harness.execute.RUNNER_OUT); they are moved into the run's
    directory, with their spools, so the pack holds them.
    """
    shutil.rmtree(work, ignore_errors=True)
    (work / "ws").mkdir(parents=True)
    run_dir.mkdir(parents=True)
    argv = [str(console_script(python, "probe")), "--matrix", "--modes", ",".join(exp.modes),
            "--workspace", str(work / "ws"), "--out", str(work / "out"),
            "--report", str(run_dir / CORROBORATION)]
    log.write(f"running: {' '.join(argv)}\n")
    log.flush()
    with open(run_dir / RECORDS, "wb") as records, open(run_dir / PROBE_LOG, "wb") as err:
        code = subprocess.run(argv, stdout=records, stderr=err, stdin=subprocess.DEVNULL,
                              env=_env(work / "home"), cwd=work, check=False).returncode
    log.write((run_dir / PROBE_LOG).read_text(errors="replace"))
    try:
        runs = json.loads((run_dir / CORROBORATION).read_text())["runs"]
    except (OSError, ValueError, KeyError):
        runs = []
    for batch in runs:
        if isinstance(batch.get("run_id"), str) and _BATCH_ARCHIVE.match(f"{batch['run_id']}.tar.gz"):
            for suffix in (".tar.gz", ".spool"):
                source = RUNNER_OUT / f"{batch['run_id']}{suffix}"
                if source.is_file():
                    shutil.move(source, run_dir / source.name)
    return code


def judge(gate_dir: Path, runs: int, exp: ProbeMatrixExpectation) -> tuple[dict[str, Table], list[str]]:
    """Points 2-5 of the rule over `gate_dir/run-N/` (what the gate checks and verify re-checks)."""
    tables, problems = {}, []
    for number in range(1, runs + 1):
        table, found = check_run(gate_dir / f"run-{number}", exp)
        tables[f"run-{number}"] = table
        problems += found
    return tables, problems + compare_runs(tables, exp)


def run_gate_runs(gate_dir: Path, work: Path, runs: int, python: str, exp: ProbeMatrixExpectation,
                  log: TextIO) -> tuple[int, list[str]]:
    """The gate's `runs` matrix runs and its verdict: the first non-zero exit (0 if none), problems.

    The tables go to OUTCOMES, so a reviewer of the pack sees them side by side.
    """
    codes = {}
    for number in range(1, runs + 1):
        log.write(f"probe matrix run {number}/{runs}\n")
        codes[number] = run_matrix(gate_dir / f"run-{number}", work / f"run-{number}", python, exp, log)
        if codes[number] == EXIT_INTERRUPTED:
            return EXIT_INTERRUPTED, []
    problems = [f"run-{n}: probe --matrix exited {code} (see run-{n}/{PROBE_LOG})"
                for n, code in codes.items() if code != 0]
    tables, found = judge(gate_dir, runs, exp)
    write_atomic(gate_dir / OUTCOMES, (json.dumps({"modes": exp.modes, "runs": tables}, indent=2,
                                                  sort_keys=True) + "\n").encode())
    return next((c for c in codes.values() if c != 0), 0), problems + found
