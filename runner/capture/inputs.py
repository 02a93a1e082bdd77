"""A run's inputs, checked the same way by direct mode (`run`), the daemon client and the daemon.

The run id, the ring size, the command as execve will find it, the workdir and
`--out`: each problem is one line (RunnerError) before anything is created.
Here, below the CLI and the daemon, because both check them: the daemon's
worker checks again what a client sent it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from normalizer.artifacts import RUN_ID_MAX, is_safe_run_id
from normalizer.redact import find_unredacted
from runner.errors import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, RunnerError
from spool.dirfd import open_dir, remove_within


def check_run_id(run_id: str | None) -> str:
    """A valid run id, or a generated one when none was given."""
    if run_id is None:
        import datetime as dt  # here: the daemon client with a --run-id never pays for them
        import secrets

        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        return f"run-{stamp}-{secrets.token_hex(2)}"
    if not is_safe_run_id(run_id) or len(run_id) > RUN_ID_MAX:
        raise RunnerError(
            f"invalid --run-id {run_id!r}: use 1-{RUN_ID_MAX} ASCII letters, digits, '_' or '-' "
            "(the run ids Assay accepts)"
        )
    if find_unredacted(run_id) is not None:
        raise RunnerError(f"invalid --run-id {run_id!r}: it looks like a secret, which no archive may carry")
    return run_id


def check_ringbuf_pages(pages: int) -> int:
    """`--ringbuf-pages`, checked the same way in both modes (the daemon's ring is its own size)."""
    if pages < 1 or pages & (pages - 1):
        raise RunnerError(f"--ringbuf-pages must be a power of two, got {pages}")
    return pages


def resolve_command(cmd: list[str], workdir: Path, env: dict[str, str]) -> str:
    """The absolute executable for `cmd[0]`, as execve will see it from `workdir`."""
    if not cmd:
        raise RunnerError("no command given: use assay-runner run [OPTIONS] -- CMD [ARGS...]")
    name = cmd[0]
    if "/" in name:
        path = (workdir / name).resolve() if not name.startswith("/") else Path(name)
        if not path.exists():
            raise RunnerError(f"command not found: {name}", EXIT_NOT_FOUND)
    else:
        found = shutil.which(name, path=env.get("PATH", os.defpath))
        if found is None:
            raise RunnerError(f"command not found: {name} (not on PATH)", EXIT_NOT_FOUND)
        path = Path(found).absolute()
    if path.is_dir() or not os.access(path, os.X_OK):
        raise RunnerError(f"command not executable: {path}", EXIT_NOT_EXECUTABLE)
    return str(path)


def command_inputs(cmd: list[str], run_id: str | None,
                   workdir: Path | None) -> tuple[list[str], str, Path, dict[str, str], str]:
    """The command, run id, workdir, environment and executable, checked as the caller.

    Shared by direct mode and the daemon client, so both refuse the same inputs the same way.
    """
    cmd = list(cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    run_id = check_run_id(run_id)
    workdir = (workdir or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise RunnerError(f"--workdir {workdir} is not a directory")
    env = dict(os.environ)
    return cmd, run_id, workdir, env, resolve_command(cmd, workdir, env)


def create_out_dir(out: Path, run_id: str, force: bool) -> Path:
    """Create --out and check it can take the archive (the daemon client's part: its runs are staged
    out of the command's reach until the command is gone, so no command-safety check is needed)."""
    try:
        make_dirs(out)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".assay-write-check-"):
            pass
    except OSError as exc:
        raise RunnerError(
            f"cannot write to --out {out}: {exc.strerror}; choose a writable directory"
        ) from exc
    archive, partial = f"{run_id}.tar.gz", f"{run_id}.spool.partial"
    for name in (archive, partial):
        if os.path.lexists(out / name) and not force:
            raise RunnerError(f"{out / name} already exists: pass --force to replace it, "
                              "or use another --run-id")
    dir_fd = open_dir(out)
    try:  # a stale (or planted) partial spool: unlinked, never followed
        remove_within(dir_fd, partial)
    finally:
        os.close(dir_fd)
    return out.resolve()


def make_dirs(path: Path) -> None:
    """Create `path` and its missing parents as 0755 whatever the umask (0777 would undo the check)."""
    missing = []
    for p in (path, *path.parents):
        if p.is_dir():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o755)
        except FileExistsError:
            if p.is_dir():
                continue  # a concurrent run sharing --out made it first
            raise
        os.chmod(p, 0o755)
