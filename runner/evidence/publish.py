"""Check normalized members against the contract, then write the archive."""

from __future__ import annotations

from pathlib import Path

from normalizer.build import NormalizedRun
from runner.errors import RunnerError
from runner.evidence.archive import MANIFEST, build_manifest, write_archive
from runner.logs import get_logger

VALIDATE_UP_TO = 8 << 20
"""Kernel layers above this size are not re-read for validation at write time:
the runner's own members are typed by construction, and re-reading would
make memory grow with run length (`assay-runner validate` checks any size)."""
log = get_logger("publish")


def publish(run: NormalizedRun, archive: Path, dir_fd: int | None = None) -> None:
    """Validate what is about to be written and write it atomically.

    A member that fails the contract is a runner bug: nothing is written, and
    the raw spool stays for `assay-runner normalize` once it is fixed.
    Past `VALIDATE_UP_TO` the kernel layer is streamed, not validated here.
    With `dir_fd` the archive is created inside that open directory (the
    run's `--out`), whatever its path points at by then.
    """
    from runner.evidence.validate import validate_members

    members = run.members()
    if run.kernel.size > VALIDATE_UP_TO:
        log.warning("publish.validation_skipped", kernel_layer_bytes=run.kernel.size,
                    hint=f"validate it with: assay-runner validate {archive}")
        problems = []
    else:
        readable = {name: m if isinstance(m, bytes) else m.read_bytes() for name, m in members.items()}
        problems = validate_members({MANIFEST: build_manifest(run.run_id, members), **readable})
    if problems:
        shown = "; ".join(problems[:3])
        raise RunnerError(f"normalized archive fails validation ({len(problems)} problems): {shown}")
    write_archive(archive, run.run_id, members, dir_fd)
