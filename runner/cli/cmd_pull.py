"""`assay-runner pull REF DIR`: fetch an archive pushed with `push`, its digest checked.

The layer is downloaded to a temporary file in DIR, its sha256 and size
compared with the manifest's, and only then renamed to `DIR/<run id>.tar.gz`:
a mismatch leaves nothing behind (exit 2). `assay-runner validate` then works
on the file. Credentials as for `push`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.cli.cmd_push import add_transport_options
from runner.errors import EXIT_BAD_INPUT, RunnerError
from runner.ship.oci import Reference, pull_archive


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `pull` subcommand."""
    parser = subparsers.add_parser(
        "pull", help="pull an archive from an OCI registry", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("ref", metavar="REF", help="REGISTRY/REPOSITORY:TAG or @sha256:...")
    parser.add_argument("dir", type=Path, metavar="DIR", help="where the archive is written")
    parser.add_argument("--force", action="store_true", help="replace an archive of the same name")
    add_transport_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ref = Reference.parse(args.ref)
    if not args.dir.is_dir():
        raise RunnerError(f"pull: {args.dir} is not a directory", EXIT_BAD_INPUT)
    print(pull_archive(ref, args.dir, args.plain_http, args.force))
    return 0
