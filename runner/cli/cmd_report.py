"""`assay-runner report ARCHIVE -o report.html`: one self-contained HTML page about a run.

Shows the process tree, a timeline of the runner phases and tool-call
windows with the kernel events inside each window (runner-clock times from
the spool: `--spool SPOOL`, or `ID.spool` found beside `ID.tar.gz`), files
by directory, endpoints, policy blocks with their decisions, and the health
verdict with what each note means. The file loads nothing from anywhere (no
scripts, a Content Security Policy that forbids fetches); every string the
observed command controlled is escaped.

Exit codes: 0 written, 2 the archive or spool cannot be read (or the spool
is not this archive's), or the output cannot be written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.errors import EXIT_BAD_INPUT, RunnerError
from runner.evidence.archive import write_atomic
from runner.review.html import render
from runner.review.load import load_view


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `report` subcommand."""
    p = sub.add_parser("report", help="write a self-contained HTML report of one run",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("archive", type=Path, metavar="ARCHIVE", help="archive (.tar.gz) or directory")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--spool", type=Path, help="the run's raw spool (default: ID.spool beside the archive)")
    p.add_argument("--no-spool", action="store_true", help="ignore a spool found beside the archive")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    view = load_view(args.archive, args.spool, find_spool=not args.no_spool)
    try:
        write_atomic(args.out, render(view).encode())
    except OSError as exc:
        raise RunnerError(f"-o {args.out}: {exc.strerror or exc}", EXIT_BAD_INPUT) from exc
    print(f"report: {args.out}")
    return 0
