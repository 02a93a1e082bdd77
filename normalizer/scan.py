"""Stage A over the spool in ring order: attribute, resolve, judge, classify, file.

Ring order is causal: a task's creation record is written before the task
runs, and a thread's records in its own syscall order, so path and
process-tree state are always up to date when an event needs it.

This is the normalizer's hot path (docs/benchmarks.md). Every record can go
the general way (decode -> attribute -> resolve -> merge network blocks ->
judge -> classify -> transient names -> file under its thread), but the two
records an agent makes most, `open` and `close` of a known thread, take a
fast path that does the same with no object per record:

- a close only drops the fd from its process's table;
- an open's evidence depends only on its base directory (the cwd or the
  dirfd's path, or none for an absolute path) and the record's bytes after
  the task ids (`rec[16:]`: flags, mode, return value, payload). The general
  way's answer for that key is memoized: the shape the event is filed as, the
  fd-table entry it makes, whether it is telemetry, and whether following
  transient names could care. An open whose answer depends on anything else
  is never memoized: a path through a procfs link or naming the opener's
  pid (normalizer/reopen.py), an openat2 RESOLVE_IN_ROOT path (its root is
  the dirfd), a cut or unresolvable path (health
  counts those per record), an EACCES under a policy (the block judge). An
  open that transient names must see (a create of a name a template could
  call random, or any open while names are tracked) is still answered from
  the memo, and then observed.

`fast_records` runs in C when the accelerator is built (normalizer/accel.py,
normalizer/fastscan.c), which also works out plain opens itself; this
module's Python is its fallback. tests/test_normspeed.py checks C, Python
and the general way alone against each other on every recorded spool and on
generated records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from itertools import islice

from ebpf.wire import (
    HEADER,
    HOOK_CLOSE,
    HOOK_FILE_OPEN,
    HOOK_NAMES,
    HOOK_NEWTASK,
    HOOK_OPEN,
    TRUNC_ARGS,
    TRUNC_UNREAD,
)
from normalizer import accel
from normalizer.blocks import EACCES, FileBlockJudge, NetBlockMerge
from normalizer.buckets import Run, ThreadBuckets, full, shape_of
from normalizer.classify import (
    CLASSIFIED_HOOKS,
    Classified,
    OpenMeta,
    cached_open_meta,
    classify,
    is_telemetry,
    kind_name,
)
from normalizer.decode import decode_one
from normalizer.escape import ESCAPE_HOOKS, EscapeWatch
from normalizer.fsops import FS_HOOKS, UNTRACED_IO_HOOKS, fs_events
from normalizer.health import CaptureFacts
from normalizer.kernelpaths import KernelPaths, is_kernel_record, kernel_open_lines
from normalizer.nsops import NS_HOOKS, NamespaceWatch
from normalizer.paths import (
    AT_FDCWD,
    O_CLOEXEC,
    RESOLVE_IN_ROOT,
    FsState,
    PathResolver,
    Resolved,
    c_string,
    joined,
    to_int32,
)
from normalizer.reopen import ALIAS_PREFIXES, may_hold_link
from normalizer.telemetry import TELEMETRY_PREFIXES, TELEMETRY_SUBSTRINGS, open_event_type
from normalizer.tracing import TRACE_HOOKS, trace_event
from normalizer.transient import TransientNames, random_span
from normalizer.tree import Process, Thread, TreeBuilder
from spool.format import Spool, SpoolTrailer

EVIDENCE_HOOKS = CLASSIFIED_HOOKS | FS_HOOKS | ESCAPE_HOOKS | NS_HOOKS | TRACE_HOOKS | {HOOK_FILE_OPEN}
"""Hooks that can give evidence; the others (close, dup, exit, ...) only update state."""
OPEN_MEMO = 1 << 13
"""Open answers remembered per generation (two generations: memory stays flat, hot keys survive)."""
FAST = True
"""Take the fast path (tests turn it off to compare with the general way alone)."""

_SIZE = HEADER.size
_unpack = HEADER.unpack_from
_OPENAT = kind_name(HOOK_OPEN)
_SLASH = ord("/")


def record_batches(records: Iterable[bytes]) -> Iterator[list[bytes]]:
    """The records as lists: a spool file's own batches, else slices of the iterable."""
    batches = getattr(records, "batches", None)
    if batches is not None:
        yield from batches()
    elif isinstance(records, list):
        yield records
    else:
        it = iter(records)
        while batch := list(islice(it, 4096)):
            yield batch


OpenAnswer = tuple[tuple[str | None, bool] | None, Classified, bool, bool]
"""A remembered open: the fd-table entry it makes (None when it failed), the shape it is
filed as, whether it is dropped telemetry, and whether transient names can ignore it."""


OpenContext = tuple[type, str, dict[tuple[int, int, int, int], OpenMeta], bool,
                    tuple[str, ...], tuple[str, ...], int, tuple[str, ...],
                    Callable[[str, bool], tuple[int, int] | None]]
"""What the C fast path needs to work out a plain open itself (normalizer/fastscan.c): the
Classified type, its kind, the open metadata seen so far, whether the block judge can act,
telemetry's prefixes and substrings (such a path may be folded, or be an `event_83`/`event_84`
line: Python decides), the memo's limit, the prefixes of paths that may hold a procfs link or
the opener's pid, and `transient.random_span` (whether a create is inert)."""


def fast_records(batch: list[bytes], i: int, tasks: dict[int, Thread], states: dict[Process, FsState],
                 memo: dict[tuple[str | None, bytes], OpenAnswer],
                 older: dict[tuple[str | None, bytes], OpenAnswer], held: dict[Hashable, Run],
                 tracked: Mapping[str, object], order: int, room: int,
                 ctx: OpenContext | None) -> tuple[int, int, int]:
    """Take `batch[i:]` while each record is a close, or an open remembered in `memo` that
    transient names can ignore (`tracked` empty), of a known thread whose process has a
    state and whose bucket is open in `held`. Returns (the first record not taken, order,
    room); stops after the record that used the last `room`.

    The C accelerator (normalizer/fastscan.c) does the same and, given `ctx`, also moves an
    answer from the `older` generation into `memo` and works out a plain open neither holds,
    as `Scan._one` and `Scan._open_answer` would; this twin leaves those to `Scan._one`. It
    is the fallback when the C is not built, and the reference the C is tested against
    (tests/test_normspeed.py).
    """
    del older, ctx  # the twin takes remembered opens only
    n = len(batch)
    tasks_get, states_get, memo_get, held_get = tasks.get, states.get, memo.get, held.get
    while i < n:
        rec = batch[i]
        if len(rec) < _SIZE:
            break
        ts, _tgid, tid, hook, dlen, _cut, _run, ret, a0, _a1, _a2, _a3 = _unpack(rec)
        if hook not in (HOOK_OPEN, HOOK_CLOSE) or len(rec) < _SIZE + dlen:
            break
        thread = tasks_get(tid)
        if thread is None:
            break
        state = states_get(thread.process)
        if state is None:
            break
        fd = a0 & 0xFFFFFFFF
        if fd & 0x80000000:
            fd -= 0x100000000
        if hook == HOOK_CLOSE:
            state.fds.pop(fd, None)
        else:
            if dlen and rec[_SIZE] == _SLASH:
                base = None
            elif fd == AT_FDCWD:
                base = state.cwd
            else:
                entry = state.fds.get(fd)
                base = entry[0] if entry else None
            hit = memo_get((base, rec[16:]))
            if hit is None or not hit[3] or tracked:
                break
            fd_entry, shape, dropped, _inert = hit
            if not dropped:
                run = held_get(thread)
                if run is None:
                    break
                if fd_entry is not None:
                    state.fds[ret] = fd_entry
                run[0].append(shape)
                pairs = run[1]
                pairs.append(order)
                pairs.append(ts)
                room -= 1
            elif fd_entry is not None:
                state.fds[ret] = fd_entry
        order += 1
        i += 1
        if room <= 0:
            break
    return i, order, room


class Scan:
    """Stage A: files each thread's evidence candidates, gathering the capture's facts."""

    def __init__(self, spool: Spool) -> None:
        header = spool.header
        self.tree = TreeBuilder(header.control_pids, header.shim_pid)
        self.resolver = PathResolver(header.workdir, self.tree.thread_of)
        self.escapes = EscapeWatch(header.cgroup_path)
        self.untraced_io: Counter[str] = Counter()
        self.namespaces = NamespaceWatch()
        self.unread: Counter[str] = Counter()
        """Records per hook with user memory the kernel could not read (TRUNC_UNREAD, TRUNC_ARGS)."""
        self.judge = FileBlockJudge(header.policy, header.uid, spool.dac)
        self.captured = 0
        self._records = spool.records
        self._merge = NetBlockMerge()
        self._memo: dict[tuple[str | None, bytes], OpenAnswer] = {}
        self._older: dict[tuple[str | None, bytes], OpenAnswer] = {}
        self._metas: dict[tuple[int, int, int, int], OpenMeta] = {}
        self.kernel_paths = KernelPaths()
        """Pairs each open with the kernel's path of its file (normalizer/kernelpaths.py)."""

    def file(self, buckets: ThreadBuckets, transient: TransientNames, drop_telemetry: bool) -> None:
        """Walk every record: transient names observe every candidate, `buckets` get the
        evidence (telemetry too unless `drop_telemetry`), as shapes with (order, ts).

        `fast_records` takes the run of records it can (closes and remembered
        opens); the record it stops at goes `_one`'s way, which remembers what
        it can for the next time.
        """
        tasks, states, held, tracked = self.tree.tasks, self.resolver.states, buckets.held, transient.tracked
        fast = (accel.native.fast_records if accel.native else fast_records) if FAST else None
        ctx: OpenContext = (Classified, _OPENAT, self._metas, self.judge.may_judge(-EACCES),
                            TELEMETRY_PREFIXES, TELEMETRY_SUBSTRINGS, OPEN_MEMO, ALIAS_PREFIXES,
                            random_span)
        self._memo.clear()
        self._older.clear()
        self.kernel_paths = KernelPaths()
        order = arrival = 0
        for batch in record_batches(self._records):
            if self.kernel_paths.active:
                batch = self.kernel_paths.rewrite(batch)
            i, n = 0, len(batch)
            while i < n:
                if fast is not None:
                    i, order, buckets.room = fast(batch, i, tasks, states, self._memo, self._older, held,
                                                  tracked, order, buckets.room, ctx)
                    if buckets.room <= 0:
                        buckets.spill()
                    if i >= n:
                        break
                rec = batch[i]
                if not self.kernel_paths.active and is_kernel_record(rec):  # the fast path stops at one
                    self.kernel_paths.active = True
                    batch = batch[:i] + self.kernel_paths.rewrite(batch[i:])
                    rec = batch[i]
                i += 1
                order += self._one(rec, arrival + i - 1, order, buckets, transient, drop_telemetry)
            arrival += n
        self.captured = arrival

    def _one(self, rec: bytes, arrival: int, order: int, buckets: ThreadBuckets,
             transient: TransientNames, drop_telemetry: bool) -> int:
        """One record `fast_records` did not take; the order positions it took (0 or 1).

        An open of a known thread is answered from the older memo generation,
        or worked out directly (`_open_answer`); every other record goes the
        general way.
        """
        opened = self._open_key(rec)
        if opened is None:
            return self._general(rec, arrival, order, buckets, transient, drop_telemetry, None)
        thread, state, key, ret, ts = opened
        hit = self._memo.get(key) or self._older.get(key)
        if hit is None:
            hit = self._open_answer(rec, key[0], ret, drop_telemetry)
            if hit is None:
                return self._general(rec, arrival, order, buckets, transient, drop_telemetry, key)
        self._remember(key, hit)
        fd_entry, shape, dropped, inert = hit
        if fd_entry is not None:
            state.fds[ret] = fd_entry
        if not inert or transient.tracked:
            transient.observe(thread, full(shape, order, ts))
        if not dropped:
            buckets.add(thread, shape, order, ts)
        return 1

    def _remember(self, key: tuple[str | None, bytes], answer: OpenAnswer) -> None:
        if len(self._memo) >= OPEN_MEMO:
            self._older = self._memo
            self._memo = {}
        self._memo[key] = answer

    def _open_key(self, rec: bytes) -> tuple[Thread, FsState, tuple[str | None, bytes], int, int] | None:
        """For a whole open record of a known thread and process: (thread, its process's state,
        the memo key, ret, ts); else None. The base is `PathResolver._join`'s."""
        if len(rec) < _SIZE:
            return None
        ts, _tgid, tid, hook, dlen, _cut, _run, ret, a0, _a1, _a2, _a3 = _unpack(rec)
        if hook != HOOK_OPEN or len(rec) < _SIZE + dlen:
            return None
        thread = self.tree.tasks.get(tid)
        state = self.resolver.states.get(thread.process) if thread is not None else None
        if thread is None or state is None:
            return None
        if dlen and rec[_SIZE] == _SLASH:
            base = None
        elif to_int32(a0) == AT_FDCWD:
            base = state.cwd
        else:
            base = state.fd_path(to_int32(a0))
        return thread, state, (base, rec[16:]), ret, ts

    def _open_answer(self, rec: bytes, base: str | None, ret: int, drop_telemetry: bool) -> OpenAnswer | None:
        """What an open resolves to from its base and bytes alone, as `resolve` and `classify`
        would give it; None when the answer depends on more (see the module docstring)."""
        _ts, _tgid, _tid, _hook, dlen, cut, _run, _ret, _a0, flags, mode, resolve, = _unpack(rec)
        if cut or self.judge.may_judge(ret) or resolve & RESOLVE_IN_ROOT:
            return None  # a cut, unread or interrupted open, or one under a dirfd root: the general way
        data = rec[_SIZE:_SIZE + dlen]
        text = c_string(data)
        path = None if text is None else joined(base, text)
        if path is None or may_hold_link(path, base, data) or self.resolver.aliased(path):
            return None
        meta_key = (flags, mode, resolve, min(ret, 0))
        meta = self._metas.get(meta_key)
        if meta is None:
            if len(self._metas) >= OPEN_MEMO:
                self._metas.clear()
            meta = self._metas[meta_key] = cached_open_meta(*meta_key)
        event_type = open_event_type(path, flags)
        shape = Classified(event_type=event_type, kind=kind_name(event_type), value=path, meta=meta,
                           order=0, ts=0)
        fd_entry = (path, bool(flags & O_CLOEXEC)) if ret >= 0 else None
        return fd_entry, shape, drop_telemetry and is_telemetry(shape), TransientNames.inert(shape)

    def _general(self, rec: bytes, arrival: int, order: int, buckets: ThreadBuckets,
                 transient: TransientNames, drop_telemetry: bool,
                 key: tuple[str | None, bytes] | None) -> int:
        """One record the general way; the order positions it took (0: not the run's, or
        merged away). An open with a memo `key` is remembered when its answer is its shape alone."""
        item = self.tree.attribute_one(decode_one(rec, arrival))
        if item is None:
            return 0
        resolver = self.resolver
        counters = (resolver.truncated, resolver.unresolved, resolver.reopens)
        aliases = len(resolver.aliases)
        r = resolver.resolve(item)
        if len(resolver.aliases) != aliases:  # a remembered read under the new link may fold no more
            self._memo.clear()
            self._older.clear()
        if not self._merge.keep(r):
            return 0
        e = item.event
        if e.truncated & (TRUNC_UNREAD | TRUNC_ARGS):
            self.unread[HOOK_NAMES.get(e.hook, str(e.hook))] += 1
        if e.hook not in EVIDENCE_HOOKS:
            return 1
        thread = item.thread
        filed = None
        for c in self._evidence(r, order):
            transient.observe(thread, c)
            filed = (shape_of(c), drop_telemetry and is_telemetry(c))
            if not filed[1]:
                buckets.add(thread, filed[0], c.order, c.ts)
        if key is not None and filed is not None and not self.judge.may_judge(e.ret) and not e.truncated \
                and counters == (resolver.truncated, resolver.unresolved, resolver.reopens):
            fd_entry = resolver.states[thread.process].fds.get(e.ret) if e.ret >= 0 else None
            self._remember(key, (fd_entry, filed[0], filed[1], TransientNames.inert(filed[0])))
        return 1

    def _evidence(self, r: Resolved, order: int) -> list[Classified]:
        hook = r.item.event.hook
        if hook in FS_HOOKS:
            if hook in UNTRACED_IO_HOOKS:
                self.untraced_io[HOOK_NAMES[hook]] += 1
            return list(fs_events(r, order))
        if hook in TRACE_HOOKS:
            return [trace_event(r, order)]
        if hook == HOOK_FILE_OPEN:
            return kernel_open_lines(r, order)
        if hook in NS_HOOKS:
            return self.namespaces.lines(r, order)
        if hook in ESCAPE_HOOKS:
            c = self.escapes.classify(r, order)
            lines = self.namespaces.spawned(r, order) if hook == HOOK_NEWTASK else []
            return lines if c is None else [c, *lines]
        c = classify(r, order, self.judge.blocked_access(r))
        return [] if c is None else [c]

    def facts(self, trailer: SpoolTrailer, platform: str) -> CaptureFacts:
        return CaptureFacts(
            drops=trailer.drops,
            emitted=trailer.emitted,
            captured=self.captured,
            unattributed_events=self.tree.stats.unattributed_events,
            root_seen=self.tree.stats.root_seen,
            unresolved_paths=self.resolver.unresolved,
            platform=platform,
            unresolved_reopens=self.resolver.unresolved_reopens,
            unresolved_aliases=self.resolver.unresolved_aliases,
            cgroup_escapes=self.escapes.migrations,
            clone_into_cgroup=self.escapes.clone_into_cgroup,
            untracked_tasks=trailer.untracked_tasks,
            untraced_io=dict(self.untraced_io),
            truncated_paths=self.resolver.truncated,
            recovered=trailer.recovered is not None,
            compat_syscalls_allowed=trailer.compat_syscalls_allowed,
            unread=dict(self.unread),
            moved_processes=len(self.namespaces.moved),
            mount_changes=self.namespaces.mount_changes,
            hooks_missing=trailer.hooks_missing,
            # a recovered spool's trailer is not the run's: its kernel records say it too
            path_source="kernel" if self.kernel_paths.active else trailer.path_source,
            kernel_paths=self.kernel_paths.paired,
            requested=self.kernel_paths.requested,
        )
