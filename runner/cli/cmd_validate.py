"""`assay-runner validate ARCHIVE`: check an archive against the v0 contract.

Exit 0 when valid, 1 when problems were found (every one is printed, one
line each, then a count), 2 when the input cannot be read safely. `--json`
prints the same result as one JSON object on stdout, for CI and scripts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from runner.display import printable
from runner.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, RunnerError
from runner.evidence.archive import ArchiveError
from runner.evidence.validate import Report, validate_path


class UnreadableReport(msgspec.Struct):
    """`--json` output when the input cannot be read (exit 2)."""

    path: str
    valid: bool
    error: str


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `validate` subcommand."""
    parser = subparsers.add_parser(
        "validate",
        help="check an archive (.tar.gz or directory) against the v0 contract",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("archive", type=Path, metavar="ARCHIVE", help="archive or directory")
    parser.add_argument("--json", action="store_true", help="print a machine-readable report")
    parser.set_defaults(func=run)


def _print_json(report: Report | UnreadableReport) -> None:
    sys.stdout.write(msgspec.json.encode(report).decode() + "\n")


def _print_text(report: Report) -> None:
    if report.valid:
        print(f"OK {report.path}: {report.members} members, run_id={report.run_id}")
        return
    for problem in report.problems:
        print(printable(str(problem)))
    count = len(report.problems)
    print(f"INVALID: {count} problem{'' if count == 1 else 's'}")


def run(args: argparse.Namespace) -> int:
    """Validate `args.archive` and print the result."""
    try:
        report = validate_path(args.archive)
    except ArchiveError as exc:
        if args.json:
            _print_json(UnreadableReport(path=str(args.archive), valid=False, error=str(exc)))
            return EXIT_BAD_INPUT
        raise RunnerError(f"cannot validate {args.archive}: {exc}", EXIT_BAD_INPUT) from exc
    if args.json:
        _print_json(report)
    else:
        _print_text(report)
    return 0 if report.valid else EXIT_CHECK_FAILED
