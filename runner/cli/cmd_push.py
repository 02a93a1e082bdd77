"""`assay-runner push ARCHIVE REF`: store an archive in an OCI registry as an artifact.

The archive is validated first (a damaged or invalid one is refused, exit 2)
and becomes the artifact's one layer, so the layer digest is its sha256.
Credentials come from the docker config (`$DOCKER_CONFIG/config.json` or
`~/.docker/config.json`: `auths`, `credHelpers`, `credsStore`), never from a
flag. Prints the reference and the layer digest. Exit 0 pushed, 2 bad input,
125 the registry refused or could not be reached.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.errors import EXIT_BAD_INPUT, RunnerError
from runner.evidence.archive import ArchiveError
from runner.evidence.validate import validate_path
from runner.ship.oci import Reference, push_archive


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `push` subcommand."""
    parser = subparsers.add_parser(
        "push", help="push an archive to an OCI registry", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("archive", type=Path, metavar="ARCHIVE", help="a run's .tar.gz")
    parser.add_argument(
        "ref", metavar="REF", help="REGISTRY/REPOSITORY:TAG, e.g. localhost:5000/team/evidence:ID"
    )
    add_transport_options(parser)
    parser.set_defaults(func=run)


def add_transport_options(parser: argparse.ArgumentParser) -> None:
    """`--plain-http` (push and pull)."""
    parser.add_argument(
        "--plain-http", action="store_true", default=None,
        help="speak HTTP, not HTTPS (the default for localhost and 127.0.0.1 registries only)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    ref = Reference.parse(args.ref)
    if not args.archive.is_file():
        raise RunnerError(f"push: {args.archive} is not a file", EXIT_BAD_INPUT)
    try:
        report = validate_path(args.archive)
    except ArchiveError as exc:
        raise RunnerError(
            f"push: {args.archive} is damaged: {exc}; nothing was pushed", EXIT_BAD_INPUT
        ) from exc
    if not report.valid or report.run_id is None:
        first = report.problems[0] if report.problems else "no run id"
        raise RunnerError(
            f"push: {args.archive} is not a valid archive ({first}); run 'assay-runner validate "
            f"{args.archive}'; nothing was pushed",
            EXIT_BAD_INPUT,
        )
    pushed = push_archive(args.archive, ref, report.run_id, args.plain_http)
    print(f"pushed {pushed.reference} {pushed.layer_digest} ({pushed.size} bytes)")
    return 0
