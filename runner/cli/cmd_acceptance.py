"""`assay-runner acceptance`: run the named acceptance gates and write a proof pack.

  assay-runner acceptance [--gates all|NAME,...] [--out DIR] [--expect NAME=FILE]
  assay-runner acceptance verify PACK [--require-gates all|NAME,...]
  assay-runner acceptance list
  assay-runner acceptance prepare [--out DIR]

Each gate observes its fixture three times with `assay-runner determinism`
(byte-identical archives, passing health), validates every archive and
checks the evidence against the gate's expectations file
(fixtures/acceptance/NAME.toml, or --expect). Results, logs, archives and
spools go under DIR/gates/NAME/; DIR/manifest.json and
DIR/subject-checksums.txt form the proof pack, rewritten after every gate.
`verify` re-checks a pack offline: every digest, every archive, and with
--require-gates that each required gate is in the pack and passed.
`prepare` removes DIR and the cgroups of runners that died (by their owner
record, as `doctor --fix` does).
docs/acceptance.md describes the gates and the pack.

Exit codes:
  0    every selected gate passed (verify: the pack verifies; prepare: clean)
  1    at least one gate failed (verify: problems found, each named;
       prepare: an earlier acceptance run still has processes)
  2    unusable input: unknown gate, bad --expect or expectations file,
       unreadable pack
  3    no gate failed, but at least one could not run (a prerequisite is
       missing: not root, the machine not ready, the SDK not installed);
       never a pass
  130  interrupted
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from probe_harness import CHECKOUT_DATA, checkout_missing
from runner.acceptance.execute import Interrupted, exit_code, run_gate
from runner.acceptance.expect import ExpectationError
from runner.acceptance.expect import load as load_expectations
from runner.acceptance.gates import ALL, GATES, Gate, select
from runner.acceptance.pack import write_pack
from runner.acceptance.verify import PackError, verify
from runner.capture import stale
from runner.capture.cgroup import RunCgroup
from runner.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, RunnerError

DEFAULT_OUT = Path("build/acceptance")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `acceptance` subcommand and its actions."""
    p = sub.add_parser("acceptance", help="run the acceptance gates and write a proof pack",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gates", default=ALL, help=f"{ALL} (default) or comma-separated gate names")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"pack directory (default: {DEFAULT_OUT})")
    p.add_argument("--expect", action="append", default=[], metavar="NAME=FILE",
                   help="check gate NAME against FILE instead of its own expectations (repeatable)")
    p.set_defaults(func=run_gates)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    v = actions.add_parser("verify", help="re-check a proof pack offline")
    v.add_argument("pack", type=Path, metavar="PACK")
    v.add_argument("--require-gates", metavar="SEL",
                   help=f"fail unless these gates ({ALL} or names) are in the pack and passed")
    v.set_defaults(func=verify_pack)
    actions.add_parser("list", help="list the gates").set_defaults(func=list_gates)
    pr = actions.add_parser("prepare", help="remove the pack directory and stale acceptance cgroups")
    pr.add_argument("--out", type=Path, default=DEFAULT_OUT, dest="prepare_out")
    pr.set_defaults(func=prepare)


def _select(spec: str) -> list[Gate]:
    try:
        return select(spec)
    except ValueError as exc:
        raise RunnerError(str(exc), EXIT_BAD_INPUT) from exc


def _expectation_files(gates: list[Gate], overrides: list[str]) -> dict[str, Path]:
    files = {g.name: g.expectations for g in gates}
    for item in overrides:
        name, sep, file = item.partition("=")
        if not sep or name not in files:
            raise RunnerError(f"--expect {item}: give NAME=FILE for a selected gate "
                              f"({', '.join(files)})", EXIT_BAD_INPUT)
        files[name] = Path(file).resolve()
    return files


def host_problem() -> str | None:
    """Why no gate can run on this machine (not root, `doctor` failing), or None."""
    if os.geteuid() != 0:
        return "the gates need root (eBPF, cgroups, Landlock): run as root"
    done = subprocess.run([sys.executable, "-m", "runner.cli.main", "doctor", "--json"],
                          capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if done.returncode == 0:
        return None
    try:
        failed = [c["name"] for c in json.loads(done.stdout)["checks"] if c["required"] and not c["ok"]]
    except (ValueError, KeyError, TypeError):
        failed = []
    return f"assay-runner doctor fails ({', '.join(failed) or 'see its output'}): run make setup"


def run_gates(args: argparse.Namespace) -> int:
    gates = _select(args.gates)
    if (needed := checkout_missing("assay-runner acceptance", ("fixtures", *CHECKOUT_DATA))) is not None:
        raise RunnerError(f"{needed} ('acceptance verify' and 'list' work anywhere)", EXIT_BAD_INPUT)
    files = _expectation_files(gates, args.expect)
    try:
        expectations = {name: load_expectations(path) for name, path in files.items()}
    except ExpectationError as exc:
        raise RunnerError(str(exc), EXIT_BAD_INPUT) from exc
    out = args.out.resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunnerError(f"--out {out}: {exc.strerror}", EXIT_BAD_INPUT) from exc
    problem = host_problem()
    results = []
    try:
        for gate in gates:
            results.append(run_gate(gate, out, expectations[gate.name], files[gate.name], problem))
            write_pack(out)
    except Interrupted:
        write_pack(out)
        print("assay-runner: acceptance: interrupted", file=sys.stderr)
        return 130
    for r in results:
        print(f"{r.status.upper().replace('_', ' ')}: {r.gate}" + (f": {r.reason}" if r.reason else ""))
    print(f"proof pack: {out}")
    return exit_code(results)


def verify_pack(args: argparse.Namespace) -> int:
    require = _select(args.require_gates) if args.require_gates else []
    try:
        manifest, problems = verify(args.pack, require)
    except PackError as exc:
        raise RunnerError(str(exc), EXIT_BAD_INPUT) from exc
    for problem in problems:
        print(problem)
    gates = ", ".join(f"{g.gate}={g.status}" for g in manifest.gates) or "none"
    if problems:
        print(f"FAIL: {len(problems)} problem(s) in {args.pack} (gates: {gates})")
        return EXIT_CHECK_FAILED
    print(f"OK {args.pack}: {len(manifest.subjects)} subjects verified, gates: {gates}")
    return 0


def list_gates(args: argparse.Namespace) -> int:
    for g in GATES:
        print(f"{g.name}: {g.title}")
    return 0


def prepare(args: argparse.Namespace) -> int:
    """Start clean: no pack from an earlier job, nothing a dead runner left.

    Cgroups are judged by their owner record (runner/capture/stale.py), never
    by name: a live run's cgroup, empty while its monitor compiles, is safe.
    """
    out = args.prepare_out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    print(f"removed {out}")
    for line in stale.sweep():
        print(line)
    try:
        parent = RunCgroup.parent_path()
    except RunnerError as exc:
        print(f"no cgroup v2 to clean: {exc}")
        return 0
    busy = []
    for cg in sorted(parent.glob("acceptance-*")) if parent.is_dir() else []:
        if pids := RunCgroup(path=cg, id=0, level=0).pids():
            busy.append(f"{cg}: still has processes {' '.join(map(str, pids))}")
    for line in busy:
        print(line)
    if busy:
        print("FAIL: an earlier acceptance run is still running: stop it, then prepare again")
        return EXIT_CHECK_FAILED
    return 0
