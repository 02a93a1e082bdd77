"""The container image's entrypoint: mount what a fresh container lacks, then run the CLI.

The mounts are the host layer's (runner/host/container.py: why the entrypoint
makes them every time); here, at the top of the stack, they are made before
`assay-runner ARGS` runs, each one a line on stderr.
"""

from __future__ import annotations

import sys

from runner.cli.main import main as cli_main
from runner.host.container import fix_container_mounts


def main(argv: list[str] | None = None) -> int:
    """Mount tracefs, debugfs and a writable cgroup v2 when missing, then `assay-runner ARGS`."""
    for note in fix_container_mounts():
        print(f"assay-runner: container: {note}", file=sys.stderr, flush=True)
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
