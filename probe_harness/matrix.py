"""`probe`: run probes across run modes, or validate a record stream.

    probe --matrix [--modes LIST] [--wrapper CMD]       every probe x every mode
    probe --target (--probe ID | --cap ID)... [--repeat N] [--list-only]
    probe --listen < records.ndjson                      validate and summarize

Records go to stdout as NDJSON, one object per probe run, mode by mode.
A probe that fails (no record, a record that does not validate) is reported
on stderr and the run goes on; the exit status is 1 at the end when anything
failed or the kernel disagreed with a record, 0 otherwise, 2 for bad usage.
Under runner modes the corroboration report (corroborate.py) is written to
--report (default OUT/corroboration.json), atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from probe_harness import corroborate
from probe_harness.contracts import ContractError, Contracts, load_contracts
from probe_harness.execute import (
    Batch,
    ProbeError,
    Result,
    add_common_options,
    all_probes,
    prepared_workspace,
    resolve_probe,
    run_batch,
    settings_from,
)
from probe_harness.modes import (
    BASELINE,
    DEFAULT_MATRIX_MODES,
    EXTERNAL,
    RUNNER_MODES,
    ModeError,
    Settings,
    check_modes,
)
from probe_harness.probefile import primary_capability
from runner.evidence.archive import write_atomic


class UsageError(ValueError):
    """The options do not make sense together."""


def select_probes(args: argparse.Namespace, contracts: Contracts, probes_dir: Path) -> list[Path]:
    """The probes --matrix or --target names, sorted and unique."""
    if args.matrix:
        return all_probes(probes_dir)
    if not args.probe and not args.cap:
        raise UsageError("--target needs --probe ID or --cap ID (repeatable)")
    chosen = {resolve_probe(p, probes_dir) for p in args.probe}
    for cap in args.cap:
        contracts.capability(cap)
        matching = [p for p in all_probes(probes_dir) if primary_capability(p) == cap]
        if not matching:
            raise UsageError(f"no probe has primary capability {cap!r}")
        chosen.update(matching)
    return sorted(chosen)


def select_modes(args: argparse.Namespace) -> list[str]:
    if args.modes:
        return [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.target:
        return [BASELINE]
    return [*DEFAULT_MATRIX_MODES, *([EXTERNAL] if args.wrapper else [])]


def stream(
    repeat: int,
    modes: list[str],
    probes: list[Path],
    settings: Settings,
    contracts: Contracts,
    out: TextIO,
    err: TextIO,
    jobs: int,
) -> tuple[int, list[Result], list[tuple[str, str | None, Path | None, list[dict[str, Any]]]]]:
    """Run every batch, up to `jobs` at a time; write records in mode order as soon as they are known.

    Batches are independent (each runner mode has its own run, cgroup and archive; targets are
    unique), and a runner batch mostly waits for the runner to attach and detach, so running
    the modes side by side is what keeps the matrix fast on two cores.
    """

    def timed(mode: str) -> tuple[Batch, float]:
        started = time.monotonic()
        batch = run_batch(mode, probes, settings, contracts)
        return batch, time.monotonic() - started

    failures: list[Result] = []
    records = 0
    runner_batches = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(timed, mode) for _ in range(repeat) for mode in modes]
        for future in futures:
            batch, seconds = future.result()
            err.write(f"probe: mode {batch.mode}: {len(probes)} probes in {seconds:.2f} s\n")
            good = [r.record for r in batch.results if r.record is not None]
            for record in good:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            records += len(good)
            for r in batch.results:
                if r.record is None:
                    failures.append(r)
                    err.write(f"probe: FAIL {r.mode} {r.probe}: {r.error}\n")
            if batch.mode in RUNNER_MODES:
                runner_batches.append((batch.mode, batch.run_id, batch.archive, good))
    return records, failures, runner_batches


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """--matrix and --target."""
    settings, contracts = settings_from(args)
    probes = select_probes(args, contracts, settings.probes_dir)
    modes = select_modes(args)
    check_modes(modes, contracts.run_modes, settings)
    if args.list_only:
        for mode in modes:
            for p in probes:
                out.write(f"{mode}\t{p.stem}\t{primary_capability(p)}\n")
        return 0
    start = time.monotonic()
    with prepared_workspace(settings):
        records, failures, runner_batches = stream(
            args.repeat, modes, probes, settings, contracts, out, err, args.jobs or len(modes)
        )
    wall = time.monotonic() - start
    disagree = 0
    if runner_batches:
        rep = corroborate.report(runner_batches)
        disagree = rep["counts"]["disagree"]
        path = args.report or settings.out / "corroboration.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(rep, indent=2, sort_keys=True) + "\n").encode())
        for e in rep["entries"]:
            if e["verdict"] == "disagree":
                err.write(f"probe: DISAGREE {e['mode']} {e['probe']}: {e['reason']}\n")
        c = rep["counts"]
        err.write(
            f"probe: corroboration: {c['agree']} agree, {c['disagree']} disagree, "
            f"{c['not_checked']} not checked ({path})\n"
        )
    err.write(
        f"probe: {records} records, {len(failures)} failed, {len(probes)} probes x {len(modes)} modes"
        f" x {args.repeat}, {wall:.1f} s\n"
    )
    return 1 if failures or disagree else 0


def listen(contracts: Contracts, inp: TextIO, out: TextIO) -> int:
    """--listen: validate every record on stdin and print a summary."""
    counts: Counter[tuple[str, str]] = Counter()
    keys: set[str] = set()
    valid = invalid = 0
    for number, line in enumerate(inp, start=1):
        if not line.strip():
            continue
        try:
            record: Any = json.loads(line)
            problems = contracts.problems(record)
        except json.JSONDecodeError as exc:
            problems = [f"not JSON: {exc}"]
        if problems:
            invalid += 1
            out.write(f"line {number}: {'; '.join(problems)}\n")
            continue
        valid += 1
        keys.add(record["schema_key"])
        counts[(record["run"]["mode"], record["result"]["observed_result"])] += 1
    for (mode, status), n in sorted(counts.items()):
        out.write(f"{mode}\t{status}\t{n}\n")
    out.write(
        f"{valid + invalid} records: {valid} valid, {invalid} invalid "
        f"(schema key {'/'.join(sorted(keys)) or contracts.boundary.key}, catalog {contracts.catalog.key})\n"
    )
    return 0 if valid and not invalid else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="probe",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    add_common_options(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--matrix", action="store_true", help="every probe in every run mode")
    action.add_argument("--target", action="store_true", help="the probes named by --probe/--cap")
    action.add_argument("--listen", action="store_true", help="validate records from stdin")
    p.add_argument("--probe", action="append", default=[], metavar="ID", help="with --target (repeatable)")
    p.add_argument(
        "--cap",
        action="append",
        default=[],
        metavar="ID",
        help="with --target: every probe whose primary capability is ID (repeatable)",
    )
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="run the selection N times")
    p.add_argument("--list-only", action="store_true", help="print mode, probe, capability; run nothing")
    p.add_argument(
        "--modes",
        help=f"comma-separated run modes (matrix default: {','.join(DEFAULT_MATRIX_MODES)}"
        f"[,{EXTERNAL} with --wrapper]; target default: {BASELINE})",
    )
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="run at most N mode batches at once (default: all modes at once; 1: one after the other)",
    )
    p.add_argument("--report", type=Path, help="corroboration report path (default: OUT/corroboration.json)")
    return p


def main() -> int:
    """Console script `probe`."""
    args = build_parser().parse_args()
    try:
        if args.repeat < 1:
            raise UsageError("--repeat must be at least 1")
        if args.jobs is not None and args.jobs < 1:
            raise UsageError("--jobs must be at least 1")
        if not args.target and (args.probe or args.cap or args.repeat != 1):
            raise UsageError("--probe, --cap and --repeat go with --target")
        if args.listen:
            return listen(load_contracts(args.catalog, args.boundary), sys.stdin, sys.stdout)
        return run(args, sys.stdout, sys.stderr)
    except (UsageError, ContractError, ModeError, ProbeError, corroborate.CorroborationError) as exc:
        print(f"probe: error: {exc}", file=sys.stderr)
        return 2
