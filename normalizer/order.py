"""Canonical order within a process: its first thread's own order, then its other threads' events by content.

A normalizer decision (docs/determinism.md, "Canonical order"):
a process's first thread (rank 0: the thread the process began with) keeps
its own syscall order. The events of its other threads come after them,
ordered by content, one record at a time (the two lines of a rename, link
or symlink stay together, source first).

Why: worker pools (libuv's under node and npm, asyncio's executor, Java's
ForkJoinPool) hand each work item to whichever thread is idle first. Which
thread did which item is a race, so a worker thread's own order, and the
order of threads by their work, differ between runs of the same job; only
the set of work done is the job's. Ordering the other threads' records by
what they did makes the same set of work the same lines in every run.

What a reader loses: nothing the archive could show. A kernel line names
its process, never its thread, so the archive never told which lines came
from which thread, nor where one thread's events ended and another's began;
the kernel layer's order is canonical, not temporal (capture times stay in
the spool). A reader who needs a worker's own sequence reads it from the
spool. The first thread's order is kept because it is the program's order
for every single-threaded process, which is most of them.

The content of a record is the line the archive will hold, without its
position: kind, the value with transient random names already in their
canonical form (normalizer/transient.py numbers them without using this
order), and the open metadata. Two records with the same content give the
same lines, so ties cannot make runs differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import msgspec

from normalizer.classify import Classified

T = TypeVar("T")
_encode = msgspec.msgpack.Encoder().encode


def content(c: Classified, rename: Callable[[str], str]) -> bytes:
    """A line's content without its position or capture time (comparable bytes).

    `rename` maps a raw value to its canonical form (the transient-name substitution).
    """
    value = None if c.value is None else rename(c.value)
    return _encode((c.event_type, c.kind, value, c.meta, c.denied))


def records(events: Iterable[Classified]) -> Iterator[list[Classified]]:
    """A thread's lines grouped by the record they came from (lines of one record share `order`)."""
    unit: list[Classified] = []
    for c in events:
        if unit and c.order != unit[0].order:
            yield unit
            unit = []
        unit.append(c)
    if unit:
        yield unit


def other_threads_order(threads: list[tuple[T, Iterable[Classified]]],
                        rename: Callable[[str], str]) -> Iterator[tuple[T, Classified]]:
    """The lines of a process's threads after its first (`threads`, in rank order), by content."""
    # msgpack values are self-delimiting, so the concatenation identifies the record's lines
    others = [(b"".join(content(c, rename) for c in unit), thread, unit)
              for thread, events in threads for unit in records(events)]
    others.sort(key=lambda item: item[0])
    for _, thread, unit in others:
        for c in unit:
            yield thread, c
