"""Where a daemon run's evidence lives until the command is gone, and how it reaches the caller.

While the command runs, the spool (and then the archive) are written to a
root-only staging directory: the command runs with its caller's uid, so any
directory the caller may write, the command could write too, and evidence
the command can rewrite is no evidence. Only after the command and every
process it left are gone (the run's cgroup is removed) are the archive and
the spool delivered into the caller's `--out`: through the directory
descriptor the caller passed (never by path), with the caller's filesystem
identity (the kernel checks the caller's permissions and the files belong
to the caller), each to a fresh temp name and renamed into place within that
directory (`runner.evidence.archive.write_streamed`, the same atomic write
direct mode uses).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from runner.capture.spawn import Credentials
from runner.daemon.peer import filesystem_identity
from runner.errors import RunnerError
from runner.evidence.archive import write_streamed

STAGING = Path("/var/lib/assay-runner/staging")
DELIVERED = (".spool", ".tar.gz")
"""The finished files a run leaves (no `.partial` spool, no temp file), spool first."""


@contextlib.contextmanager
def staging_dir(run_id: str, root: Path = STAGING) -> Iterator[Path]:
    """A fresh root-only directory for one run, removed afterwards whatever happened."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    path = Path(tempfile.mkdtemp(prefix=f"{run_id}.", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def deliver(staging: Path, run_id: str, out_fd: int, creds: Credentials) -> list[str]:
    """Copy the run's finished spool and archive into `out_fd` as the caller; the names delivered.

    The spool first: if the archive could not be made, the spool still
    reaches the caller for `assay-runner normalize`.
    """
    names = [f"{run_id}{suffix}" for suffix in DELIVERED if (staging / f"{run_id}{suffix}").is_file()]
    for name in names:
        with open(staging / name, "rb") as src, filesystem_identity(creds):
            try:
                write_streamed(Path(name), lambda f, s=src: shutil.copyfileobj(s, f, 1 << 20), out_fd)
            except OSError as exc:
                raise RunnerError(f"cannot write {name} into --out: {exc.strerror or exc}") from exc
    return names
