"""`assay-runner` command line: one module per subcommand.

Each command module exposes `register(subparsers)`, which adds its parser and
sets `func(args) -> int`. Errors the user can act on are `RunnerError`s and
come out as one line on stderr with the command's documented exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from runner import __version__
from runner.display import printable
from runner.errors import EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, RunnerError
from runner.logs import configure_logging

COMMANDS = ("run", "normalize", "validate", "diff", "determinism", "doctor", "policy", "observe",
            "check-events", "daemon", "show", "acceptance", "report", "push", "pull")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser, with every subcommand registered (or just `only`, to keep start-up light)."""
    parser = argparse.ArgumentParser(
        prog="assay-runner",
        description=(
            "Run a command under eBPF observation (openat, connect, exec, datagram "
            "peers) and write a deterministic, verifiable v0 evidence archive."
        ),
        epilog="Run 'assay-runner COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"assay-runner {__version__}")
    parser.add_argument(
        "--log-format",
        choices=("console", "json"),
        default="console",
        help="runner log format on stderr: text lines (default; warnings only unless -v) or JSON lines "
             "(info too)",
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show the runner's info logs on a terminal too")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"runner.cli.cmd_{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    chosen = _chosen_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser(chosen)
    if chosen == "run":  # unrecognized arguments are the top parser's to report: one line, 125 too
        from runner.cli.cmd_run import bad_usage
        parser.error = bad_usage  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    configure_logging(args.log_format, args.verbose)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # inside the try: a reader that left must not surface at interpreter exit
        return code
    except BrokenPipeError:
        # `show | head`: the reader has what it wanted. Stop quietly; stdout goes to /dev/null so the
        # interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except RunnerError as exc:
        print(printable(f"assay-runner: error: {exc}"), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("assay-runner: interrupted", file=sys.stderr)
        return 130


def _chosen_command(argv: list[str]) -> str | None:
    """The subcommand named on the command line, so only its module (and its imports) load.

    None (register everything) for help, unknown names and anything unusual.
    """
    words = iter(argv)
    for word in words:
        if word == "--log-format":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
        elif word in ("-h", "--help", "--version"):
            return None
    return None


if __name__ == "__main__":
    sys.exit(main())
