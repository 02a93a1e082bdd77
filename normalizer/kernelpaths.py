"""Kernel paths: each open named by the file the kernel opened, not by the string it was given.

Where the monitor runs ebpf/kpath.c (ebpf/kpaths.py), every open of the run
writes a HOOK_FILE_OPEN record from inside the kernel's `security_file_open`:
the path `d_path` gives for the opened file, its device and inode, the
opener's mount namespace, and which traced syscall the thread is inside.
This stage rewrites the record stream before anything reads it, one record
for one record, so every later stage (fd tables, telemetry, the fast path's
memo, the C accelerator) works on the kernel's answer as if the syscall had
passed that path:

- An open (`openat`, `open`, `openat2`, `creat`) or `open_by_handle_at`
  that succeeded takes the path of its thread's latest kernel record made
  inside that same call. A thread makes one syscall at a time, and the
  kernel record is written inside the call, before its exit: so the pair is
  (same thread, kernel record after the previous record of the thread and
  before this exit, `ts` included). Nothing another thread does can pair with
  it, and a buffer rewritten by a racing thread changes only the requested
  string, never the kernel's. An interrupted call held until the thread's
  next call (monitor.c `held`) keeps the time of its interruption, so it
  pairs with nothing made after it. A failed call, or any other record of the
  thread, ends the wait: a kernel record whose exit was lost is never given
  to a later open.
- A kernel record made outside any traced open (io_uring's OPENAT, from the
  submitting thread or an io_uring worker) is evidence of its own: an
  `event_85` line (normalizer/scan.py). One made inside an exec (the binary,
  its interpreter) is the exec's and adds nothing.
- The requested string is kept where it was: in the spool's raw record.
  `requested` maps each kernel path to the first string that named it
  differently (not the same path, nor a relative path ending in it), and
  `assay-runner show --spool` prints it beside the archive's value as it
  prints a transient name's raw one (runner/review).

Paths the kernel gives that are not a file's name are not used, and the
requested string stays: a pseudo file (`pipe:[N]`, `anon_inode:...`, not
absolute), an unlinked file (d_path appends ` (deleted)`), a path `d_path`
could not produce. A path from another mount namespace than the run's first
(a bind mount inside `unshare -Urm`, say) names the file as that namespace
sees it; when the run saw the same device and inode opened from its own
namespace, the line takes that path instead, which names the file the host
has.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from ebpf.wire import HEADER, HOOK_FILE_OPEN, HOOK_OPEN, HOOK_OPEN_BY_HANDLE, TRUNC_FIRST, TRUNC_UNREAD
from normalizer.classify import Classified, cached_open_meta, kind_name
from normalizer.paths import Resolved, c_string
from normalizer.text import escape_bytes

_SIZE = HEADER.size
_unpack = HEADER.unpack_from
_pack = HEADER.pack
AT_FDCWD = -100
RESOLVE_IN_ROOT = 0x10
DELETED = b" (deleted)"
PAIRED_HOOKS = frozenset({HOOK_OPEN, HOOK_OPEN_BY_HANDLE})
"""Joined syscalls whose exit takes the kernel path of the file they opened."""
KERNEL_OPEN = 85
"""The `event_85` line: an open the kernel made outside any traced open syscall (io_uring)."""


def kernel_open_lines(r: Resolved, order: int) -> list[Classified]:
    """The line of a kernel record made outside any traced syscall (`a3` 0), with its path and the
    open metadata of the file's flags (`ret`: the kernel has dropped O_CREAT, O_EXCL and O_TRUNC by
    then, the access mode is whole); none for one made inside a call (that call's record carries
    it) or naming no file."""
    e = r.item.event
    value = c_string(e.data) if e.a3 == 0 else None
    if value is None:
        return []
    return [Classified(event_type=KERNEL_OPEN, kind=kind_name(KERNEL_OPEN), value=value,
                       meta=cached_open_meta(e.ret & 0xFFFFFFFF, 0, 0, 0), order=order, ts=e.ts)]


def is_kernel_record(rec: bytes) -> bool:
    """A HOOK_FILE_OPEN record (the scan starts this stage at the first one)."""
    return len(rec) >= _SIZE and rec[16] == HOOK_FILE_OPEN and rec[17] == 0


@dataclass
class KernelPaths:
    """The pairing state of one walk over a spool's records, in ring order."""

    active: bool = False
    """Set at the first kernel record: before it there is nothing to pair."""
    paired: int = 0
    """Opens whose line names the kernel's path."""
    requested: dict[str, str] = field(default_factory=dict)
    """Kernel path -> the first requested string that named it differently (v0 text)."""
    _pending: dict[int, tuple[int, int, bytes | None]] = field(default_factory=dict)
    """tid -> (ts, syscall hook it was made inside, kernel path) of its latest kernel record."""
    _home_ns: int | None = None
    """The mount namespace of the run's first kernel record: the command's own."""
    _home_paths: dict[tuple[int, int], bytes] = field(default_factory=dict)
    """(device, inode) -> its latest path opened from the run's own mount namespace."""

    def rewrite(self, records: list[bytes]) -> list[bytes]:
        """`records` (ring order, continuing the walk) with the pairs rewritten, one for one."""
        return [self._one(rec) for rec in records]

    def _one(self, rec: bytes) -> bytes:
        if len(rec) < _SIZE:
            return rec
        ts, tgid, tid, hook, dlen, cut, run, ret, a0, a1, a2, a3 = _unpack(rec)
        if hook == HOOK_FILE_OPEN:
            path = self._kernel_path(rec[_SIZE:_SIZE + dlen], cut, a0, a1, a2)
            if a3 in PAIRED_HOOKS:
                self._pending[tid] = (ts, a3, path)
            return rec if path is None else self._with_path(rec, path)
        pending = self._pending.get(tid)
        if pending is None or ts < pending[0]:
            return rec  # no kernel record waits, or this record predates it (a held interruption)
        del self._pending[tid]
        if hook != pending[1] or ret < 0 or pending[2] is None:
            return rec
        self.paired += 1
        if hook == HOOK_OPEN:  # an absolute path: no dirfd, no RESOLVE_IN_ROOT base any more
            self._note_request(pending[2], rec[_SIZE:_SIZE + dlen].split(b"\0", 1)[0])
            a0, a3 = AT_FDCWD, a3 & ~RESOLVE_IN_ROOT
        payload = pending[2] + b"\0"
        cut &= ~(TRUNC_FIRST | TRUNC_UNREAD)
        return _pack(ts, tgid, tid, hook, len(payload), cut, run, ret, a0, a1, a2, a3) + payload

    def _kernel_path(self, data: bytes, cut: int, dev: int, ino: int, mnt_ns: int) -> bytes | None:
        """The path a kernel record gives for its file, or None when it names no file."""
        if self._home_ns is None:
            self._home_ns = mnt_ns
        path = data.split(b"\0", 1)[0]
        if cut or not path.startswith(b"/") or path.endswith(DELETED):
            return None
        if mnt_ns == self._home_ns:
            self._home_paths[(dev, ino)] = path
            return path
        return self._home_paths.get((dev, ino), path)

    def _note_request(self, path: bytes, asked: bytes) -> None:
        """Remember `asked` for `path` when it does not name `path` lexically."""
        same = posixpath.normpath(asked) if asked else b""
        if same == path or (not asked.startswith(b"/") and path.endswith(b"/" + same)):
            return
        self.requested.setdefault(escape_bytes(path), escape_bytes(asked))

    @staticmethod
    def _with_path(rec: bytes, path: bytes) -> bytes:
        """A kernel record carrying `path` (the home namespace's name for its file, when known)."""
        fields = list(_unpack(rec))
        fields[4] = len(path) + 1
        return _pack(*fields) + path + b"\0"
