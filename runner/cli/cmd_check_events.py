"""`assay-runner check-events FILE`: validate a black-box events.jsonl against its contract."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blackbox.check import check_file
from runner.display import printable
from runner.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-events",
        help="validate a black-box events.jsonl (every per-line and run-level contract rule)",
        description=(
            "Check FILE against ../shared/spec/decision-events-blackbox.md and the 9-event catalog: "
            "required fields and enums, black-box rules, trace/span/parent invariants, event order "
            "(7 or 7b), timestamps, required artifacts, constraints, invented intent wording and "
            "statuses without evidence. Each violation is printed as FILE:LINE: [rule] message. "
            "Exit 0 when valid, 1 with violations, 2 when FILE cannot be read."
        ),
    )
    p.add_argument("file", type=Path, metavar="FILE", help="an events.jsonl")
    p.add_argument("--verify-artifacts", action="store_true",
                   help="also require every artifact FILE references (content_ref, relative to FILE's "
                        "directory) to exist and match its sha256")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        violations = check_file(args.file, args.verify_artifacts)
    except OSError as exc:
        print(f"assay-runner: error: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for v in violations:
        print(printable(v.render(str(args.file))))
    if violations:
        print(f"{args.file}: {len(violations)} violation(s)", file=sys.stderr)
        return EXIT_CHECK_FAILED
    print(f"{args.file}: valid", file=sys.stderr)
    return 0
