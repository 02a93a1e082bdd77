"""Check normalized members against the contract and Assay's rules, sweep for secrets, then write.

Two gates, both before a byte of the archive exists:

1. conformance (`validate_members`: the contract and every Assay rule,
   runner/evidence/conformance/): a member that fails is a runner bug;
2. the fail-closed secret sweep (Assay's, archive.rs:202-214): no member may
   still match a rule of the canonical secret table after redaction. It
   runs over every member whatever its size; the kernel layer was swept line
   by line as stage B wrote it (normalizer/layer_digest.py), and the
   capability surface piece by piece as it was streamed
   (normalizer/surface.py), so here they are only asked for their answer.

Either way nothing is written (exit 125), and the raw spool stays for
`assay-runner normalize` once the cause is fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from normalizer.build import NormalizedRun
from normalizer.redact import find_unredacted_bytes
from runner.errors import RunnerError
from runner.evidence.archive import MANIFEST, Member, build_manifest, write_archive
from runner.logs import get_logger

VALIDATE_UP_TO = 8 << 20
"""Kernel layers or capability surfaces above this size are not re-read for
validation at write time: the runner's own members are typed by
construction, and re-reading would make memory grow with run length
(`assay-runner validate` checks any size). The surface's own rule (each list
sorted, without duplicates) was checked as it was streamed. The secret
sweep is never skipped."""
log = get_logger("publish")


def unredacted(members: Mapping[str, Member]) -> tuple[str, str] | None:
    """(member, rule) of the first secret-shaped value left in any member, or None."""
    for name, member in sorted(members.items()):
        rule = find_unredacted_bytes(member) if isinstance(member, bytes) else member.unredacted
        if rule is not None:
            return name, rule
    return None


def warm() -> None:
    """Import and prime what publishing needs: validate's decoders, the kernel line schema's
    validator (jsonschema, about 40 ms), the redaction rules. The daemon calls it once before it
    forks workers; direct mode calls it from the live normalizer while the command runs."""
    import runner.evidence.validate  # noqa: F401 - its decoders are built at import
    from normalizer import redact
    from runner.evidence.conformance import upstream

    upstream.warm()
    redact.rules()


def publish(run: NormalizedRun, archive: Path, dir_fd: int | None = None, sync: bool = True) -> None:
    """Validate and sweep what is about to be written, then write it atomically.

    With `dir_fd` the archive is created inside that open directory (the
    run's `--out`), whatever its path points at by then. `sync=False`: no
    fsync (a staging copy, delivered durably later).
    """
    from runner.evidence.validate import validate_members

    members = run.members()
    leak = unredacted(members)
    if leak is not None:
        raise RunnerError(
            f"refusing to publish {archive.name}: {leak[0]} still holds an unredacted {leak[1]}-shaped "
            "value after redaction (a runner bug); nothing was written and the raw spool is kept"
        )
    if run.kernel.size > VALIDATE_UP_TO or run.surface.size > VALIDATE_UP_TO:
        log.warning("publish.validation_skipped", kernel_layer_bytes=run.kernel.size,
                    surface_bytes=run.surface.size, hint=f"validate it with: assay-runner validate {archive}")
        problems = []
    else:
        readable = {name: m if isinstance(m, bytes) else m.read_bytes() for name, m in members.items()}
        problems = validate_members({MANIFEST: build_manifest(run.run_id, members), **readable}, sweep=False)
    if problems:
        shown = "; ".join(problems[:3])
        raise RunnerError(f"normalized archive fails validation ({len(problems)} problems): {shown}")
    write_archive(archive, run.run_id, members, dir_fd, sync)
