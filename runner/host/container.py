"""The container image's entrypoint: mount what a fresh container lacks, then run the CLI.

Why not leave it to `doctor --fix`: every `docker run` starts from a fresh
mount namespace, and docker mounts no tracefs, no debugfs and, on a hybrid
cgroup host, no cgroup v2. Without them `run` stops at its first check, so
each container would need `doctor --fix` first. The mounts are cheap and
`fix_mounts` only adds what is missing, so the entrypoint does them every
time; headers (slow, network) stay with `doctor --fix`. Each mount it makes
or fails to make is one line on stderr; a failure (no CAP_SYS_ADMIN) is then
explained by the command's own checks.
"""

from __future__ import annotations

import sys

from runner.cli.main import main as cli_main
from runner.host.mounts import fix_mounts


def main(argv: list[str] | None = None) -> int:
    """Mount tracefs, debugfs and cgroup v2 when missing, then `assay-runner ARGS`."""
    for note in fix_mounts():
        print(f"assay-runner: container: {note}", file=sys.stderr, flush=True)
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
