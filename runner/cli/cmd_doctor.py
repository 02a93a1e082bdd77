"""`assay-runner doctor [--fix] [--json]`: is this machine ready for a run?

One line per prerequisite, `ok`/`FAIL`/`warn` and what to do, so a failed
set-up is diagnosed without reading a BCC traceback. `--fix` applies the safe
fixes first (tracefs/debugfs mounts, kernel headers) and says what it changed;
`scripts/setup.sh` calls it, so set-up and doctor share one implementation
(runner/host/). Exit 0 when every required check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

from runner.capture.limits import available
from runner.capture.stale import survey, sweep
from runner.errors import EXIT_CHECK_FAILED
from runner.host import checks as host_checks
from runner.host import native
from runner.host.result import Check


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `doctor` subcommand."""
    parser = subparsers.add_parser(
        "doctor",
        help="check what a run needs from this machine (and fix it with --fix)",
        description=(
            "Check the prerequisites of 'assay-runner run': root, bcc, kernel headers, "
            "tracefs, cgroup v2, a real BPF ring-buffer tracepoint load, the monitor's hooks on this "
            "kernel (and the minimum kernel), pid namespaces, "
            "Landlock, the pids/memory limit controllers, run cgroups left by runners that "
            "died, and whether the C fast paths are built. Exit 0 when every required check "
            "passes, 1 otherwise."
        ),
    )
    parser.add_argument(
        "--fix",
        action="store_true",
        help="first mount tracefs/debugfs, install or link kernel headers, compile the monitor once, "
             "and clean up after runners that died (their cgroups and spools) (needs root)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(func=run_doctor)


def _apply_fixes(notes: TextIO) -> list[str]:
    """Run every safe fix, printing each change as it happens."""
    if os.geteuid() != 0:
        skipped = "skipped: --fix needs root (mounts, /lib/modules links, apt-get)"
        print(f"fix: {skipped}", file=notes)
        return [skipped]
    changes: list[str] = []
    for note in (*host_checks.apply_fixes(), *sweep()):
        print(f"fix: {note}", file=notes, flush=True)
        changes.append(note)
    if not changes:
        print("fix: nothing to change", file=notes)
    return changes


def check_limits() -> Check:
    """Can a run's cgroup get its pids and memory limits here? (`run` notes it in health when not.)"""
    where = available()
    missing = sorted(name for name, how in where.items() if how.startswith("unavailable"))
    detail = ", ".join(f"{name}: {how}" for name, how in sorted(where.items()))
    return Check("limits", not missing, detail,
                 f"runs get no {' or '.join(missing)} limit (health says so): enable the controller "
                 "(cgroup v2 cgroup.subtree_control, or mount its cgroup v1 hierarchy)", required=False)


def check_stale() -> Check:
    """Run cgroups left by runners that died (runner/capture/stale.py)."""
    stale, skipped = survey()
    left = sorted(f"{s.path} ({s.reason})" for s in skipped if not s.live)
    if not stale and not left:
        return Check("stale", True, "no run cgroup of a dead runner", required=False)
    said = []
    if stale:
        said.append(f"{len(stale)} run cgroups of runners that died "
                    f"({', '.join(sorted({s.path.name for s in stale}))})")
    if left:
        said.append(f"{len(left)} left alone: " + "; ".join(left))
    return Check("stale", False, "; ".join(said),
                 "'assay-runner doctor --fix' (or the next run) kills what is left in the dead runners' "
                 "cgroups, removes them and rebuilds their spools; a cgroup left alone is never touched "
                 "(remove it by hand once you know whose it is)", required=False)


def check_native() -> Check:
    """The four C pieces (runner/host/native.py): each has a Python fallback with the same output,
    so a missing one costs only time, and only this line says so."""
    pieces = native.pieces()
    missing = [p for p in pieces if not p.ok]
    if not missing:
        return Check("native", True, ", ".join(p.name for p in pieces) + " built and in use", required=False)
    return Check("native", False,
                 "; ".join(p.detail.removesuffix(f": {native.FIX}") for p in missing)
                 + " (the Python fallback is slower)", native.FIX, required=False)


def run_doctor(args: argparse.Namespace) -> int:
    """Apply fixes when asked, run every check, report; 0 when ready."""
    # With --json, stdout carries only the JSON document; notes go to stderr.
    fixes = _apply_fixes(sys.stderr if args.json else sys.stdout) if args.fix else []
    checks = [*host_checks.run_checks(), check_limits(), check_stale(), check_native()]
    ready = all(c.ok or not c.required for c in checks)
    if args.json:
        doc = {
            "ok": ready,
            "checks": [
                {"name": c.name, "status": c.status, "ok": c.ok, "required": c.required,
                 "detail": c.detail, "fix": c.fix}
                for c in checks
            ],
            "fixes": fixes,
        }
        print(json.dumps(doc, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.status:<4}  {c.name:<{width}}  {c.message}")
    return 0 if ready else EXIT_CHECK_FAILED
