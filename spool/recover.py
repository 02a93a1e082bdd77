"""Close the spool of a run whose runner died, so it can still be normalized.

A runner killed mid-run leaves `<name>.partial`: whole frames flushed at
each drain (spool/writer.py), possibly a torn last frame, and no trailer.
Recovery cuts the torn tail, appends a trailer marked `recovered` (the
command's exit status and the kernel's counters died with the runner, so
none is claimed: `exit_code` -1, no drops, no emitted counts) and renames the
file to its final name. The normalizer turns the mark into the health note
`s2_run_recovered` and `cgroup_correlation: partial` (the end of the run was
never seen), so a recovered archive never passes as a complete run.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import msgspec

from spool.dirfd import rename_within
from spool.format import _LEN, MAX_FRAME, Batch, SpoolHeader, SpoolTrailer, _decoder, encode_frame

UNKNOWN_EXIT = -1


class CannotRecover(RuntimeError):
    """The partial spool cannot be made into a spool (no header, or the final name is taken)."""


class NoHeader(CannotRecover):
    """The partial spool has no whole header frame: the run died before anything of it was written."""


@dataclass(frozen=True)
class Recovered:
    run_id: str
    records: int
    cut_bytes: int
    """Bytes of a torn last frame that were cut off."""


def recover(dir_fd: int, name: str, cause: str, died_ns: int | None = None) -> Recovered:
    """Turn `<name>.partial` in `dir_fd` into the complete spool `name`, marked `recovered=cause`.

    The trailer keeps when the partial file was last written (its last flush) and `died_ns`, when
    the runner died if that is known: the interval between was not observed."""
    partial = name + ".partial"
    with contextlib.suppress(FileNotFoundError):
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        raise CannotRecover(f"{name} already exists: the partial spool is left as it is")
    fd = os.open(partial, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        header, good, records, has_trailer = _scan(fd)
        if header is None:
            raise NoHeader(f"{partial} has no spool header: nothing of the run was written")
        st = os.fstat(fd)
        cut = st.st_size - good
        if not has_trailer:
            os.ftruncate(fd, good)
            os.lseek(fd, good, os.SEEK_SET)
            os.write(fd, encode_frame(SpoolTrailer(exit_code=UNKNOWN_EXIT, drops={}, emitted={},
                                                   recovered=cause, last_flush_ns=st.st_mtime_ns,
                                                   died_ns=died_ns)))
        os.fsync(fd)
        rename_within(dir_fd, partial, name)
    finally:
        os.close(fd)
    return Recovered(header.run_id, records, cut)


def _scan(fd: int) -> tuple[SpoolHeader | None, int, int, bool]:
    """(header, end of the last whole frame, records, trailer seen), reading frame by frame."""
    header: SpoolHeader | None = None
    good = records = 0
    trailer = False
    with os.fdopen(os.dup(fd), "rb") as f:
        while True:
            head = f.read(_LEN.size)
            if len(head) != _LEN.size:
                break
            (size,) = _LEN.unpack(head)
            body = f.read(size) if size <= MAX_FRAME else b""
            if size > MAX_FRAME or len(body) != size:
                break
            try:
                frame = _decoder.decode(body)
            except msgspec.DecodeError:
                break
            if header is None and not isinstance(frame, SpoolHeader):
                break
            if isinstance(frame, SpoolHeader):
                header = frame
            elif isinstance(frame, Batch):
                records += len(frame.records)
            elif isinstance(frame, SpoolTrailer):
                trailer = True
            good += _LEN.size + size
    return header, good, records, trailer
