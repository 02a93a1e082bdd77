"""Rebuild the archive of a run whose runner died, from what its spool holds (stale.py finds them).

The spool's name comes from an owner record: it is data, never a path. Only
`<run id>.spool` is accepted (no `/`, no `..`), and every file is opened
through the output directory's fd, never following a symlink.
"""

from __future__ import annotations

import os
from pathlib import Path

from normalizer.build import normalize
from normalizer.decode import DecodeError
from runner.capture.owner import spool_name_ok
from runner.errors import RunnerError
from runner.evidence.publish import publish
from spool.format import SpoolError, read_spool
from spool.recover import CannotRecover, NoHeader, recover

SPOOL_SUFFIX = ".spool"


def rebuild(out_fd: int, out: Path, spool: str, died_ns: int | None = None) -> str:
    """Close `spool` (if partial) in `out_fd` and write its archive beside it; what was done, or why not.

    A partial spool becomes an archive marked partial (`s2_run_recovered`); a
    complete spool without an archive (the runner died while publishing)
    becomes the archive the run would have written. An existing archive is
    never replaced.

    Two deaths leave nothing to rebuild, and that is said instead
    (docs/architecture.md, "Runner death"): before the spool had a whole
    header (the instant between creating the file and its first write; the
    file is left as it is), and before the first drain holding a record of
    the command reached the file (the spool is kept, closed). An archive of
    the latter would claim nothing of the command and say its root process
    was never seen (`cgroup_correlation: failed`), which Assay refuses.
    `died_ns` is when the runner died (CLOCK_REALTIME ns, from its warden), if known.
    """
    if not spool_name_ok(spool):
        return (f"refused to rebuild from the spool name {spool!r}: it is not a run id's spool; "
                "nothing was touched")
    archive = out / (spool.removesuffix(SPOOL_SUFFIX) + ".tar.gz")
    marked = ""
    try:
        if _exists(out_fd, spool + ".partial"):
            got = recover(out_fd, spool, "runner_died", died_ns)
            marked = (f" ({got.records} records; marked partial: s2_run_recovered"
                      + (f", {got.cut_bytes} torn bytes cut" if got.cut_bytes else "") + ")")
        elif not _exists(out_fd, spool):
            return (f"nothing to rebuild into {archive}: no spool of the dead run is in {out} ({spool}); "
                    "it died before creating one, or the spool was removed")
        if _exists(out_fd, archive.name):
            return f"kept {out / spool}: {archive} already exists and is not replaced"
        spool_fd = os.open(spool, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=out_fd)
        try:
            run = normalize(read_spool(Path(f"/proc/self/fd/{spool_fd}")))
            if run.health.cgroup_correlation == "failed":
                return (f"nothing to rebuild into {archive}: the run died before any record of its command "
                        f"reached the spool ({out / spool} is kept, closed)")
            publish(run, archive, out_fd)
        finally:
            os.close(spool_fd)
    except NoHeader:
        return (f"nothing to rebuild into {archive}: the run died before its spool had a header "
                f"({out / spool}.partial is left as it is)")
    except (CannotRecover, SpoolError, DecodeError, RunnerError) as exc:
        return f"cannot rebuild {archive} from {out / spool}: {exc}"
    except OSError as exc:
        return f"cannot rebuild {archive} from {out / spool}: {exc.strerror or exc}"
    return f"rebuilt {archive} from the dead run's spool{marked}"


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
