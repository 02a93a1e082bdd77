"""`assay-runner normalize`: re-run the normalizer on a raw spool, offline."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from normalizer.artifacts import RUN_ID_MAX
from normalizer.build import normalize
from normalizer.decode import DecodeError
from runner.capture.inputs import check_run_id
from runner.display import printable
from runner.errors import EXIT_BAD_INPUT, RunnerError
from runner.evidence.publish import publish
from spool.dirfd import open_dir
from spool.format import SpoolError, read_spool
from spool.recover import CannotRecover, recover


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "normalize",
        help="rebuild an archive from a raw spool (no root needed)",
        description="Normalize a raw spool written by 'run' into a v0 archive.",
    )
    p.add_argument("spool", type=Path, metavar="SPOOL",
                   help="a RUN_ID.spool file, or the RUN_ID.spool.partial a run could not finish (full disk, "
                        "killed runner): it is closed first, and the archive is marked partial")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="archive to write (default: the spool's path with .tar.gz)")
    p.add_argument("--run-id", metavar="ID", help="override the run id recorded in the spool")
    p.set_defaults(func=main)


PARTIAL = ".spool.partial"


def close_partial(partial: Path) -> Path:
    """Close a spool its run could not finish (spool/recover.py); the complete spool's path."""
    final = partial.with_name(partial.name.removesuffix(".partial"))
    fd = open_dir(partial.parent)
    try:
        got = recover(fd, final.name, "incomplete_spool")
    except (CannotRecover, OSError) as exc:
        raise RunnerError(f"cannot close {partial}: {exc}", EXIT_BAD_INPUT) from exc
    finally:
        os.close(fd)
    print(printable(f"assay-runner: closed {partial} as {final} ({got.records} records"
                    + (f", {got.cut_bytes} torn bytes cut" if got.cut_bytes else "") + ")"), file=sys.stderr)
    return final


def main(args: argparse.Namespace) -> int:
    try:
        run_id = check_run_id(args.run_id) if args.run_id is not None else None
    except RunnerError as exc:
        raise RunnerError(str(exc), EXIT_BAD_INPUT) from exc
    if not args.spool.is_file():
        raise RunnerError(f"no such spool: {args.spool}", EXIT_BAD_INPUT)
    if args.spool.name.endswith(PARTIAL):
        args.spool = close_partial(args.spool)
    try:
        spool = read_spool(args.spool)
        if run_id is None:
            try:
                check_run_id(spool.header.run_id)
            except RunnerError:
                raise RunnerError(f"the spool's run id {spool.header.run_id!r} is not one Assay accepts: "
                                  f"give a new one with --run-id (1-{RUN_ID_MAX} ASCII letters, digits, "
                                  "'_' or '-')", EXIT_BAD_INPUT) from None
        run = normalize(spool, run_id)
    except (SpoolError, DecodeError) as exc:
        raise RunnerError(f"cannot normalize {args.spool}: {exc}", EXIT_BAD_INPUT) from exc
    out = args.out or args.spool.with_suffix(".tar.gz")
    try:
        publish(run, out)
    except OSError as exc:
        raise RunnerError(f"cannot write {out}: {exc.strerror}", EXIT_BAD_INPUT) from exc
    print(printable(f"assay-runner: wrote {out} ({run.kernel.count} kernel events)"), file=sys.stderr)
    return 0
