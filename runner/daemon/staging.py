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
import functools
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from runner.capture.spawn import Credentials
from runner.daemon.peer import filesystem_identity
from runner.errors import RunnerError
from runner.evidence.archive import write_streamed
from spool.dirfd import FILE_MODE, SPOOL_MODE

STAGING = Path("/var/lib/assay-runner/staging")
DELIVERED = (".spool", ".tar.gz")
"""The finished files a run leaves (no `.partial` spool, no temp file), spool first."""


@contextlib.contextmanager
def staging_dir(run_id: str, root: Path = STAGING) -> Iterator[Path]:
    """A fresh root-only directory for one run, removed afterwards whatever happened.

    Its name carries the worker's pid (`<run id>.<pid>.<random>`): if the worker is killed, the
    daemon finds it and delivers what it holds (runner/daemon/orphan.py)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    path = Path(tempfile.mkdtemp(prefix=f"{run_id}.{os.getpid()}.", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def deliver(staging: Path, run_id: str, out_fd: int, creds: Credentials,
            skip: tuple[str, ...] = ()) -> list[str]:
    """Copy the run's finished spool and archive into `out_fd` as the caller; the names delivered.

    The spool first: if the archive could not be made, the spool still
    reaches the caller for `assay-runner normalize`. `skip`: suffixes already delivered.
    """
    names = [f"{run_id}{suffix}" for suffix in DELIVERED
             if suffix not in skip and (staging / f"{run_id}{suffix}").is_file()]
    for name in names:
        with open(staging / name, "rb") as src, filesystem_identity(creds):  # this thread's fsuid only
            try:
                write_streamed(Path(name), functools.partial(shutil.copyfileobj, src, length=1 << 20), out_fd,
                               mode=SPOOL_MODE if name.endswith(".spool") else FILE_MODE)
            except OSError as exc:
                raise RunnerError(f"cannot write {name} into --out: {exc.strerror or exc}") from exc
    return names


class Delivery:
    """The run's evidence on its way to the caller: the spool as soon as it is final, while the
    archive is still being made (a copy and an fsync of tens of MB, off the time the caller
    waits after the command's exit), then the archive.
    """

    def __init__(self, staging: Path, run_id: str, out_fd: int, creds: Credentials) -> None:
        self._args = (staging, run_id, out_fd, creds)
        self._thread: threading.Thread | None = None
        self._error: RunnerError | None = None

    def spool_final(self) -> None:
        """The spool is complete and every process of the run is gone: deliver it now, in the background."""
        self._thread = threading.Thread(target=self._spool, name="assay-deliver-spool", daemon=True)
        self._thread.start()

    def _spool(self) -> None:
        try:
            deliver(*self._args, skip=DELIVERED[1:])
        except RunnerError as exc:
            self._error = exc

    def finish(self) -> list[str]:
        """Wait for the spool and deliver what else there is; RunnerError if either failed."""
        early: tuple[str, ...] = ()
        if self._thread is not None:
            self._thread.join()
            if self._error is not None:
                raise self._error
            early = DELIVERED[:1]
        return deliver(*self._args, skip=early)
