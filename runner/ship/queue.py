"""The daemon's shipping queue: every finished archive reaches the registry, or stays on disk.

With `[ship] ref = "registry/repo"` in the daemon config, a run worker puts a
copy of each archive it delivered into the queue directory (root-only,
`/var/lib/assay-runner/ship` unless `[ship] queue_dir` says otherwise): the
copy is the queue entry, written to a temp name and renamed, so an entry is
always a whole archive. The daemon's shipper thread pushes entries oldest
first as `REF:<run id>` and removes an entry only once the registry has
accepted its manifest. A registry that is down or refuses costs nothing but
time: the entry stays, the shipper retries with exponential backoff (1 s
doubling to 5 minutes, reset by a success), `daemon status` lists what is
waiting and why, and a restarted daemon starts with whatever is there. An
entry that is no valid archive (a truncated copy after a crash, say) is never
pushed and never deleted: it is moved to `failed/` with a log line.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from runner.errors import RunnerError
from runner.evidence.archive import ArchiveError
from runner.evidence.validate import validate_path
from runner.ship.oci import Reference, push_archive

log = structlog.get_logger()

DEFAULT_QUEUE = Path("/var/lib/assay-runner/ship")
SUFFIX = ".tar.gz"
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0
IDLE_POLL_S = 1.0
"""How often an idle shipper looks for entries a worker left (workers are other processes)."""


def _entry_run_id(path: Path) -> str:
    """`<run id>.<hex>.tar.gz` -> run id."""
    return path.name[: -len(SUFFIX)].rsplit(".", 1)[0]


@dataclass
class Pending:
    """One entry as `daemon status` shows it."""

    run_id: str
    path: str
    attempts: int = 0
    last_error: str = ""


@dataclass
class ShipQueue:
    root: Path = DEFAULT_QUEUE

    def prepare(self) -> None:
        (self.root / "failed").mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def enqueue(self, archive: Path, run_id: str) -> Path:
        """Copy the archive in as one whole entry (temp name, fsync, rename)."""
        self.prepare()
        final = self.root / f"{run_id}.{secrets.token_hex(4)}{SUFFIX}"
        temp = self.root / f".{final.name}.partial"
        with open(archive, "rb") as src, open(temp, "xb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(temp, final)
        return final

    def entries(self) -> list[Path]:
        """Whole entries, oldest first (by modification time, then name)."""
        try:
            found = [p for p in self.root.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(".")]
        except FileNotFoundError:
            return []
        return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


@dataclass
class Shipper:
    """The daemon's thread that empties the queue into `REF:<run id>`."""

    queue: ShipQueue
    ref: str
    plain_http: bool | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _state: dict[str, Pending] = field(default_factory=dict)
    _thread: threading.Thread | None = None
    pushed: int = 0

    def start(self) -> None:
        self.queue.prepare()
        self._thread = threading.Thread(target=self._loop, name="assay-ship", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def pending(self) -> list[Pending]:
        """What waits to be pushed, oldest first, with its attempts and last error."""
        with self._lock:
            entries = self.queue.entries()
            return [self._state.get(p.name) or Pending(_entry_run_id(p), str(p)) for p in entries]

    def _loop(self) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._stop.is_set():
            entries = self.queue.entries()
            if not entries:
                self._stop.wait(IDLE_POLL_S)
                continue
            if all(self._ship(entry) for entry in entries):
                backoff = BACKOFF_FIRST_S
                continue
            self._stop.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _ship(self, entry: Path) -> bool:
        """Push one entry; True when it left the queue (pushed, or set aside as invalid)."""
        run_id = _entry_run_id(entry)
        with self._lock:
            state = self._state.setdefault(entry.name, Pending(run_id, str(entry)))
            state.attempts += 1
        try:
            report = validate_path(entry)
            if not report.valid:
                raise ArchiveError(str(report.problems[0]) if report.problems else "invalid")
        except ArchiveError as exc:
            entry.rename(self.queue.root / "failed" / entry.name)
            log.error("ship.invalid_entry", run_id=run_id, entry=str(entry), error=str(exc))
            self._forget(entry)
            return True
        try:
            pushed = push_archive(entry, Reference.parse(f"{self.ref}:{run_id}"), run_id, self.plain_http)
        except RunnerError as exc:
            with self._lock:
                state.last_error = str(exc)
            log.warning("ship.retry", run_id=run_id, attempts=state.attempts, error=str(exc))
            return False
        entry.unlink()
        self._forget(entry)
        self.pushed += 1
        log.info("ship.pushed", run_id=run_id, reference=pushed.reference, digest=pushed.layer_digest)
        return True

    def _forget(self, entry: Path) -> None:
        with self._lock:
            self._state.pop(entry.name, None)
