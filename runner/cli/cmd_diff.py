"""`assay-runner diff BASE NEW`: capability changes between two runs.

BASE and NEW are archives (.tar.gz) or directories laid out like one. Shows
entries added and removed per capability-surface set (filesystem_paths,
network_endpoints, process_execs, mcp_tools, policy_decisions), changed
health fields and notes, and correlation status, binding (by tool_call_id)
and ambiguity changes. The human view groups filesystem entries under their
directory; --json prints full paths as one JSON object on stdout.

Exit codes:
  0  compared (changes or not), unless --fail-on matched
  1  --fail-on added|removed|any matched: added = a surface entry appeared,
     removed = a surface entry disappeared, any = any change shown here
     (surface, health or correlation)
  2  an input is missing, unreadable, or not a valid v0 archive
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from runner.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, RunnerError
from runner.evidence.bounded import ArchiveError, open_members
from runner.evidence.capdiff import CapDiffError, RunArtifacts, decode_artifacts, diff_runs, render_text
from runner.evidence.validate import validate_members


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `diff` subcommand."""
    p = sub.add_parser(
        "diff",
        help="show capability changes between two archives (or directories)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("base", type=Path, metavar="BASE", help="the reference archive or directory")
    p.add_argument("new", type=Path, metavar="NEW", help="the archive or directory to compare")
    p.add_argument("--json", action="store_true",
                   help="print the diff as one JSON object (full paths, no grouping)")
    p.add_argument("--fail-on", choices=("added", "removed", "any"),
                   help="exit 1 when such a change exists (default: always exit 0 after comparing)")
    p.set_defaults(func=main)


def load_run(path: Path, role: str) -> RunArtifacts:
    """Read and validate one input; a RunnerError (exit 2) says what is wrong with it."""
    if not path.exists():
        raise RunnerError(f"{role} {path}: no such archive or directory", EXIT_BAD_INPUT)
    try:
        members = open_members(path)
        problems = validate_members(members)  # streams large members again: they can still fail to read
    except (ArchiveError, OSError) as exc:
        raise RunnerError(f"{role} {path}: unreadable: {exc}", EXIT_BAD_INPUT) from exc
    if problems:
        raise RunnerError(
            f"{role} {path}: not a valid v0 archive ({len(problems)} problems, first: "
            f"{problems[0]}); run 'assay-runner validate {path}' for all",
            EXIT_BAD_INPUT,
        )
    try:
        return decode_artifacts(members)
    except CapDiffError as exc:  # validation passed, so only a validator gap gets here
        raise RunnerError(f"{role} {path}: {exc}", EXIT_BAD_INPUT) from exc


def main(args: argparse.Namespace) -> int:
    base = load_run(args.base, "BASE")
    new = load_run(args.new, "NEW")
    try:
        diff = diff_runs(str(args.base), base, str(args.new), new)
    except CapDiffError as exc:  # validation passed, so only a validator gap gets here
        raise RunnerError(str(exc), EXIT_BAD_INPUT) from exc
    if args.json:
        sys.stdout.write(msgspec.json.encode(diff).decode() + "\n")
    else:
        print(render_text(diff))
    return EXIT_CHECK_FAILED if diff.fails(args.fail_on) else 0
