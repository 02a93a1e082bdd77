"""The v0 evidence archive: deterministic writing and hostile-safe reading.

Writing: `manifest.json` first, then the other members sorted by path, each
with fixed metadata (mode 0644, uid/gid 0, empty owner names, mtime 0), as
tarfile writes a USTAR archive, in one gzip member with mtime 0 and no file
name, written to a temp file in the target directory and renamed into place.
The deflate stream is made of segments (normalizer/deflate.py): the kernel
layer's data is its own, which the kernel layer deflated as stage B wrote it,
so only the other members are compressed here (a streamed one, the
capability surface, read back in blocks). The same members give the same
bytes, whether the kernel layer and the surface are streamed or bytes.

Reading never extracts to disk and is bounded by what the manifest declares
(runner/evidence/bounded.py): anything that is not a plain file with a safe
relative name, or that is larger than declared or than the caps, is refused
with a one-line reason.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO, Protocol

import msgspec

from normalizer import deflate
from normalizer.artifacts import MANIFEST_SCHEMA, Manifest, ManifestEntry
from runner.evidence.bounded import MANIFEST, member_bytes, open_archive, open_members
from runner.evidence.bounded import ArchiveError as ArchiveError  # re-exported: callers catch it from here
from spool.dirfd import FILE_MODE, create_new, remove_within, rename_within

MEMBER_ORDER = (
    "capability-surface.json",
    "correlation-report.json",
    "events.ndjson",
    "layers/kernel.ndjson",
    "layers/policy.ndjson",
    "layers/sdk.ndjson",
    "observation-health.json",
)
OWN_SEGMENT = frozenset({"layers/kernel.ndjson"})
"""Members whose data is a deflate segment of its own by name, whatever the member's type, so
the same members give the same bytes. Any other member is deflated in the current segment, a
streamed one (the capability surface) read back in blocks of `COPY_BYTES`."""
COPY_BYTES = 1 << 20

_json = msgspec.json.Encoder()


def sha256_ref(data: bytes) -> str:
    """The manifest's digest notation for `data`."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


class StreamedMember(Protocol):
    """A member too large to hold in memory: its size, digest and sweep, and a reader."""

    size: int

    @property
    def sha256(self) -> str: ...

    @property
    def unredacted(self) -> str | None: ...

    def reader(self) -> BinaryIO: ...


class SegmentMember(StreamedMember, Protocol):
    """A streamed member that deflated its bytes as a segment of its own as it was written (one of
    `OWN_SEGMENT`: the kernel layer)."""

    def deflated(self) -> deflate.Deflated: ...


Member = bytes | StreamedMember


def _entry(path: str, data: Member) -> ManifestEntry:
    if isinstance(data, bytes):
        return ManifestEntry(path=path, sha256=sha256_ref(data), bytes=len(data))
    return ManifestEntry(path=path, sha256="sha256:" + data.sha256, bytes=data.size)


def build_manifest(run_id: str, members: Mapping[str, Member]) -> bytes:
    """Manifest bytes for `members` (which must not include the manifest)."""
    files = {path: _entry(path, data) for path, data in sorted(members.items())}
    return _json.encode(Manifest(schema=MANIFEST_SCHEMA, run_id=run_id, files=files)) + b"\n"


def _own_segment(data: bytes | SegmentMember) -> deflate.Deflated:
    """`data` as a finished segment: the one a streamed member made as it was written."""
    return deflate.deflated(data) if isinstance(data, bytes) else data.deflated()


def _copy(data: StreamedMember, stream: deflate.GzipSegments) -> None:
    """A streamed member's `size` bytes into the current segment, a block at a time."""
    reader, left = data.reader(), data.size
    while left:
        block = reader.read(min(COPY_BYTES, left))
        if not block:
            raise OSError(f"a streamed member ended {left} bytes short of its size")
        stream.write(block)
        left -= len(block)


def _write_tar(fileobj: BinaryIO, run_id: str, members: Mapping[str, Member]) -> None:
    """The USTAR bytes tarfile writes for these members (file entries only, as upstream writes,
    archive.rs:435-449), each member's data padded to a block, then two zero blocks and zeros
    to a whole record; deflated in segments (normalizer/deflate.py)."""
    ordered: list[tuple[str, Member]] = [(MANIFEST, build_manifest(run_id, members))]
    ordered += sorted(members.items())
    stream = deflate.GzipSegments(fileobj)
    offset = 0
    for path, data in ordered:
        size = len(data) if isinstance(data, bytes) else data.size
        stream.write(_info(path, size, tarfile.REGTYPE, 0o644).tobuf(tarfile.USTAR_FORMAT, "utf-8",
                                                                     "surrogateescape"))
        if path in OWN_SEGMENT:
            stream.splice(_own_segment(data))  # type: ignore[arg-type]  # bytes or a SegmentMember
        elif isinstance(data, bytes):
            stream.write(data)
        else:
            _copy(data, stream)
        offset += tarfile.BLOCKSIZE + size
        stream.write(bytes(-offset % tarfile.BLOCKSIZE))
        offset += -offset % tarfile.BLOCKSIZE
    offset += 2 * tarfile.BLOCKSIZE
    stream.write(bytes(2 * tarfile.BLOCKSIZE + -offset % tarfile.RECORDSIZE))
    stream.close()


def archive_bytes(run_id: str, members: dict[str, Member]) -> bytes:
    """The deterministic .tar.gz of `members` plus their manifest."""
    raw = io.BytesIO()
    _write_tar(raw, run_id, members)
    return raw.getvalue()


def _info(name: str, size: int, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = kind
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_atomic(path: Path, data: bytes, dir_fd: int | None = None) -> None:
    """Write `data` to `path` through a temp file in the same directory."""
    write_streamed(path, lambda f: f.write(data), dir_fd)


def write_streamed(path: Path, write: Callable[[BinaryIO], object], dir_fd: int | None = None,
                   sync: bool = True, mode: int = FILE_MODE) -> None:
    """Call `write(file)` on a new temp file beside `path`, then rename it into place.

    Everything happens inside one directory fd (`dir_fd`, or `path`'s parent
    opened once): the temp file is created with O_EXCL|O_NOFOLLOW and renamed
    within that directory, so a symlink planted at either name, or a parent
    swapped for a symlink meanwhile, never redirects the write. `sync=False`
    skips the fsync, for a staging copy that is itself copied durably. `mode`:
    the file's exact permissions (spool.dirfd.SPOOL_MODE for a raw spool).
    """
    owned = dir_fd is None
    directory = (os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if dir_fd is None
                 else dir_fd)
    tmp = f".{path.name}.{secrets.token_hex(8)}.tmp"
    try:
        with create_new(directory, tmp, mode) as f:
            write(f)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        rename_within(directory, tmp, path.name)
    except BaseException:
        remove_within(directory, tmp)
        raise
    finally:
        if owned:
            os.close(directory)


def write_archive(path: Path, run_id: str, members: Mapping[str, Member], dir_fd: int | None = None,
                  sync: bool = True) -> None:
    """Stream the archive for `members` to `path` atomically (inside `dir_fd` when given)."""
    write_streamed(path, lambda f: _write_tar(f, run_id, members), dir_fd, sync)


def read_archive(path: Path) -> dict[str, bytes]:
    """Members of the archive at `path` by name, all in memory; directories are skipped.

    The bounded reader (runner/evidence/bounded.py) checks every header first:
    links, devices, unsafe names, duplicates, oversize headers and members
    past their declared size or the caps are refused, so a hostile archive
    cannot write anywhere or choose how much is read.
    """
    return {name: member_bytes(m) for name, m in open_archive(path).items()}


def load_members(source: Path) -> dict[str, bytes]:
    """Members from an archive file or from a directory laid out like one, all in memory."""
    return {name: member_bytes(m) for name, m in open_members(source).items()}
