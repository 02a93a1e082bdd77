"""`assay-runner show ARCHIVE`: what a run did, readable on a terminal.

Prints the health verdict and the capabilities first (programs run, files
written and read, network, policy blocks), then the counts, health with
what each note means, the process tree
(argv where recorded), files grouped by directory with their access modes,
endpoints, policy blocks with the decisions behind them, and the tool calls
with the kernel events inside each call's window. Times and the tree's
parent links come from the raw spool: `--spool SPOOL`, or `ID.spool` found
beside `ID.tar.gz`. Every string the observed command controlled is printed
with control characters escaped. Failed PATH-search execs are folded into
the exec they led to, and files only looked for (every open failed) are
counted, not listed; `--all` lists them. `--json` prints all the data as one
JSON object.

Exit codes: 0 shown, 2 the archive or spool cannot be read (or the spool is
not this archive's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from runner.review.load import load_view
from runner.review.text import render


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `show` subcommand."""
    p = sub.add_parser("show", help="summarize one run's archive for a reviewer",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("archive", type=Path, metavar="ARCHIVE", help="archive (.tar.gz) or directory")
    p.add_argument("--spool", type=Path, help="the run's raw spool (default: ID.spool beside the archive)")
    p.add_argument("--no-spool", action="store_true", help="ignore a spool found beside the archive")
    p.add_argument("--json", action="store_true", help="print the review as one JSON object")
    p.add_argument("--all", action="store_true",
                   help="list every failed PATH lookup and every file only looked for (folded by default)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    view = load_view(args.archive, args.spool, find_spool=not args.no_spool)
    if args.json:
        sys.stdout.write(msgspec.json.encode(view).decode() + "\n")
    else:
        print(render(view, fold=not args.all))
    return 0
