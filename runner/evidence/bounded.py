"""Bounded reading of evidence archives: a hostile archive costs what its manifest declares, no more.

An archive reaches `validate`, `diff`, `show` and `report` from anywhere, so
reading it must not let its bytes choose how much memory or time we spend.
Every tar header is checked before its data is touched:

- extended headers (GNU long names and links, pax records) are refused above
  `MAX_HEADER_BYTES`, before tarfile reads them into memory;
- only plain files with safe relative names, each once, at most `MAX_MEMBERS`;
- `manifest.json` (the writer's first member, at most `MAX_MANIFEST_BYTES`)
  declares every member's size: a member larger than its declared size, a
  member the manifest does not declare above `MAX_UNDECLARED_BYTES`, and
  declared totals past the hard caps are refused on their header, so a
  small archive that inflates to gigabytes is stopped before it inflates.

NDJSON members up to `INLINE_BYTES` and JSON documents up to
`INLINE_DOCUMENT_BYTES` are read into memory. Larger members stay in the
archive as `ArchiveMember`s, streamed again from the compressed file in
`CHUNK_BYTES` pieces whenever they are read: `iter_lines` walks NDJSON line
by line with each line bounded by `MAX_LINE_BYTES`, and
runner/evidence/docstream.py parses a document a token at a time. Memory is
then flat whatever the member's size; time grows with the declared sizes,
which the hard caps bound. docs/artifacts.md ("Reading limits") lists the limits.
"""

from __future__ import annotations

import gzip
import hashlib
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import msgspec

from runner.evidence.intact import Damaged, check_intact

MANIFEST = "manifest.json"
MAX_MEMBERS = 64
MAX_HEADER_BYTES = 4096
"""A GNU long name or link, or a pax header: PATH_MAX; v0 names are under 30 bytes."""
MAX_MANIFEST_BYTES = 1 << 20
"""64 members of about 150 bytes each fit many times over."""
MAX_UNDECLARED_BYTES = 1 << 20
"""A member the manifest does not declare (or one read before the manifest): it is a
validation problem anyway, so it is read only far enough to report it."""
MAX_DOCUMENT_BYTES = 64 << 20
"""A JSON document member (surface, health, correlation): streamed when large, but one JSON value."""
MAX_MEMBER_BYTES = 1 << 30
MAX_TOTAL_BYTES = 2 << 30
MAX_LINE_BYTES = 1 << 20
"""An NDJSON line: the longest the runner writes is a kernel event with its 8 KiB
payload, escaped at most sixfold in JSON, so this is over twenty times that."""
INLINE_BYTES = 8 << 20
"""NDJSON members up to this size are held in memory; larger ones are streamed."""
INLINE_DOCUMENT_BYTES = 1 << 20
"""JSON documents up to this size are held in memory (and decoded whole); larger ones are streamed
(runner/evidence/docstream.py)."""
CHUNK_BYTES = 1 << 20

_EXTENDED = {tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
             tarfile.SOLARIS_XHDTYPE}
_PLAIN = {tarfile.REGTYPE, tarfile.AREGTYPE}
_SPACES = b" \t\r\x0b\x0c"


class ArchiveError(ValueError):
    """The archive cannot be read safely; the message says why."""


class ArchiveMember:
    """A member too large to hold: read again from the archive each time.

    Satisfies `archive.StreamedMember`. The digest is computed on the first
    full read and kept.
    """

    def __init__(self, archive: Path, name: str, offset: int, size: int) -> None:
        self.archive, self.name, self.offset, self.size = archive, name, offset, size
        self._sha256: str | None = None

    def reader(self) -> BinaryIO:
        """The compressed archive, positioned at this member's first byte (read `size` bytes)."""
        stream = gzip.open(self.archive, "rb")  # noqa: SIM115 - the caller closes it
        stream.seek(self.offset)
        return stream  # type: ignore[return-value]  # a GzipFile: typeshed does not count it as a BinaryIO

    def chunks(self) -> Iterator[bytes]:
        """The member's bytes in pieces of at most CHUNK_BYTES; ArchiveError if it ends early."""
        digest = hashlib.sha256()
        left = self.size
        try:
            with self.reader() as stream:
                while left:
                    chunk = stream.read(min(left, CHUNK_BYTES))
                    if not chunk:
                        raise ArchiveError(f"member {self.name!r} is truncated")
                    left -= len(chunk)
                    digest.update(chunk)
                    yield chunk
        except (OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"cannot read member {self.name!r}: {exc}") from exc
        self._sha256 = digest.hexdigest()

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            for _ in self.chunks():
                pass
        assert self._sha256 is not None
        return self._sha256


ReadMember = bytes | ArchiveMember
"""A member as read: in memory, or streamed from the archive."""


def member_chunks(member: ReadMember) -> Iterable[bytes]:
    return (member,) if isinstance(member, bytes) else member.chunks()


def member_size(member: ReadMember) -> int:
    return len(member) if isinstance(member, bytes) else member.size


def member_sha256(member: ReadMember) -> str:
    """The manifest's digest notation for the member."""
    if isinstance(member, bytes):
        return "sha256:" + hashlib.sha256(member).hexdigest()
    return "sha256:" + member.sha256


def member_bytes(member: ReadMember) -> bytes:
    """The whole member in memory (its size was admitted against the manifest and the caps)."""
    return member if isinstance(member, bytes) else b"".join(member.chunks())


Lines = Iterator[tuple[int, bytes | None]]
"""(line number, bytes) pairs; None stands for a line over the length limit."""


def iter_line_blocks(chunks: Iterable[bytes], limit: int = MAX_LINE_BYTES) -> Lines:
    """(number of its first line, block of whole lines) over an NDJSON stream, lines numbered from 1.

    Blocks end at a newline (the last one at the end of the stream), so no
    line is split. A line that grows past `limit` before its newline comes as
    (number, None) and is skipped, never held. Memory: one chunk plus one line.
    """
    number = 1
    carry = b""
    skipping = False  # inside an over-long line, discarding up to its newline
    for chunk in chunks:
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            skipping, number, chunk = False, number + 1, chunk[nl + 1:]
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n")
        if cut < 0:
            carry = buf
        else:
            block, carry = buf[:cut], buf[cut + 1:]
            yield number, block
            number += block.count(b"\n") + 1
        if len(carry) > limit:
            carry = carry.lstrip(_SPACES)  # leading blanks do not count towards a line's length
            if len(carry) > limit:
                yield number, None
                skipping, carry = True, b""
    if carry and not skipping:
        yield number, carry


def block_lines(number: int, block: bytes, limit: int = MAX_LINE_BYTES) -> Lines:
    """(line number, line) for every non-blank line of one block of `iter_line_blocks`, whose first
    line is `number`; None for a line over `limit`.

    A line is given from its first non-blank byte (JSON ignores leading
    whitespace), and that is where its length counts from. The block is split
    in C, and a block of only blank lines (a member of newlines) is skipped
    whole, so a line costs no more than its own bytes.
    """
    if not block.strip():
        return
    for line_number, line in enumerate(block.split(b"\n"), start=number):
        if line[:1] in _SPACES:
            line = line.lstrip(_SPACES)
        if line:
            yield line_number, (line if len(line) <= limit else None)


def iter_lines(chunks: Iterable[bytes], limit: int = MAX_LINE_BYTES) -> Lines:
    """(line number, line) for every non-blank line of an NDJSON stream; None for one over `limit`
    (`block_lines` of every block)."""
    for number, block in iter_line_blocks(chunks, limit):
        if block is None:
            yield number, None
        else:
            yield from block_lines(number, block, limit)


def safe_name(name: str) -> str:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or "\\" in name:
        raise ArchiveError(f"unsafe member name {name!r}")
    return str(p)


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile reads a long name or pax header whole before returning its member: check it first."""

    def _proc_member(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXTENDED and self.size > MAX_HEADER_BYTES:
            raise ArchiveError(f"a {self.size}-byte long-name or pax header (at most {MAX_HEADER_BYTES} "
                               "are read): not an archive the runner wrote")
        return super()._proc_member(tarfile)  # type: ignore[misc]  # tarfile's private hook, not in typeshed


class _Budget:
    """What the manifest declares, and the sizes admitted so far against it and the caps."""

    def __init__(self) -> None:
        self.declared: dict[str, int] = {}
        self.total = 0

    def declare(self, manifest: bytes) -> None:
        """Take the declared sizes from the manifest; an unreadable one declares nothing
        (validation reports it), so every other member then counts as undeclared."""
        try:
            files = msgspec.json.decode(manifest).get("files", {})
            declared = {k: v["bytes"] for k, v in files.items() if type(v.get("bytes")) is int}
        except (msgspec.DecodeError, UnicodeDecodeError, AttributeError, TypeError):
            return
        total = sum(max(0, size) for size in declared.values())
        if total > MAX_TOTAL_BYTES:
            raise ArchiveError(f"manifest.json declares {total} bytes of members; an archive may hold "
                               f"at most {MAX_TOTAL_BYTES}")
        self.declared = declared

    def admit(self, name: str, size: int) -> None:
        """Refuse a member whose header size is past what may be read for it."""
        if name == MANIFEST:
            limit, why = MAX_MANIFEST_BYTES, "the manifest's limit"
        elif name in self.declared:
            limit, why = self.declared[name], "what manifest.json declares"
        else:
            limit, why = MAX_UNDECLARED_BYTES, "the limit for a member manifest.json does not declare"
        if not name.endswith(".ndjson"):
            limit = min(limit, MAX_DOCUMENT_BYTES)
        limit = min(limit, MAX_MEMBER_BYTES)
        if size > limit:
            raise ArchiveError(f"member {name!r} is {size} bytes, more than {why} ({limit} bytes)")
        self.total += size
        if self.total > MAX_TOTAL_BYTES:
            raise ArchiveError(f"members total more than {MAX_TOTAL_BYTES} bytes")


def open_archive(path: Path) -> dict[str, ReadMember]:
    """Members of the .tar.gz at `path` by name, every header checked before its data is read.

    Refuses (ArchiveError, one line) links, devices, sparse files, unsafe
    names, duplicates, oversize headers, and sizes past the manifest or the
    caps; then a damaged file: the whole gzip stream and the tar layout's
    zero bytes are checked (runner/evidence/intact.py). Directories are
    skipped. Nothing is ever extracted to disk.
    """
    members: dict[str, ReadMember] = {}
    budget = _Budget()
    try:
        with tarfile.open(path, mode="r:gz", tarinfo=_BoundedTarInfo) as tar:
            for count, info in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise ArchiveError(f"more than {MAX_MEMBERS} members")
                name = safe_name(info.name)
                if info.isdir():
                    continue
                if info.type not in _PLAIN:
                    raise ArchiveError(f"member {name!r} is not a regular file")
                if name in members:
                    raise ArchiveError(f"member {name!r} appears twice")
                budget.admit(name, info.size)
                if name != MANIFEST and info.size > (INLINE_BYTES if name.endswith(".ndjson") else
                                                     INLINE_DOCUMENT_BYTES):
                    members[name] = ArchiveMember(path, name, info.offset_data, info.size)
                    continue
                handle = tar.extractfile(info)
                data = handle.read(info.size) if handle else b""
                if len(data) != info.size:
                    raise ArchiveError(f"member {name!r} is truncated")
                members[name] = data
                if name == MANIFEST:
                    budget.declare(data)
            headers, end = tar.getmembers(), tar.offset  # every member is loaded: the loop read to the end
        check_intact(path, headers, end)
    except (tarfile.TarError, OSError, EOFError, zlib.error, Damaged) as exc:
        raise ArchiveError(f"cannot read {path}: {exc}") from exc
    return members


def open_directory(source: Path) -> dict[str, ReadMember]:
    """Files below `source` as members, with the same limits as an archive (symlinks skipped)."""
    budget = _Budget()
    files = sorted(f for f in source.rglob("*") if f.is_file() and not f.is_symlink())
    if len(files) > MAX_MEMBERS:
        raise ArchiveError(f"more than {MAX_MEMBERS} files")
    manifest = source / MANIFEST
    if manifest in files:
        budget.admit(MANIFEST, manifest.stat().st_size)
        budget.declare(manifest.read_bytes()[:MAX_MANIFEST_BYTES])
    out: dict[str, ReadMember] = {}
    for file in files:
        name = file.relative_to(source).as_posix()
        size = file.stat().st_size
        if name != MANIFEST:
            budget.admit(name, size)
        with open(file, "rb") as f:
            out[name] = data = f.read(size + 1)
        if len(data) != size:
            raise ArchiveError(f"{name!r} changed while it was read")
    return out


def open_members(source: Path) -> dict[str, ReadMember]:
    """Members from an archive file or from a directory laid out like one, bounded."""
    return open_directory(source) if source.is_dir() else open_archive(source)
