"""Stage 2: attribute each event to a process and thread of the run's tree.

Host pids are neither stable across runs nor sequential under parallel work,
so the normalized `pid` is the process's position in the kernel-observed
process tree instead: the command is 1, and processes are numbered depth
first, children in the order their parent created them (per creating thread,
threads in canonical order). A deterministic command therefore gets the same
numbers every run, however the scheduler interleaves its processes
(docs/determinism.md).

Events of the runner's own helpers (the pid-namespace parent and init) are
control, not evidence. A signal or cgroup-migration record belongs to the
task it targets (it is written by whoever sends the signal or moves the task). Events from
tasks whose creation was never seen are counted as unattributed: they make `cgroup_correlation` partial.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import msgspec

from ebpf.wire import HOOK_CGROUP_ATTACH, HOOK_EXEC, HOOK_NEWTASK, HOOK_SIGNAL
from normalizer.decode import RawEvent

CLONE_THREAD = 0x00010000


@dataclass(eq=False)
class Process:
    """A thread group of the run, as first seen being created."""

    parent: Process | None
    main: Thread = field(init=False)
    number: int = 0

    def threads(self) -> list[Thread]:
        """Its threads in canonical order: the main thread, then depth first by creation."""
        return list(_threads_in_order(self.main))


@dataclass(eq=False)
class Thread:
    """A task of the run; its children are kept in the order it created them."""

    process: Process
    child_threads: list[Thread] = field(default_factory=list)
    child_processes: list[Process] = field(default_factory=list)
    rank: int = 0


def _new_process(parent: Process | None) -> Process:
    proc = Process(parent)
    proc.main = Thread(proc)
    return proc


class Attributed(msgspec.Struct, frozen=True, gc=False):
    """An event with the thread it belongs to; `spawned` is set for a new process.

    A Struct, not a dataclass: one is made per record, and a frozen
    dataclass's __init__ costs several times more.
    """

    event: RawEvent
    thread: Thread
    spawned: Process | None = None


@dataclass
class TreeStats:
    """What could not be attributed, for health."""

    unattributed_events: int = 0
    root_seen: bool = False


class TreeBuilder:
    """Walks events in (causal) ring order and builds the run's process tree."""

    def __init__(self, control_pids: Iterable[int], shim_pid: int) -> None:
        self._control = frozenset(control_pids) | {shim_pid}
        self._shim = shim_pid
        self._tasks: dict[int, Thread] = {}
        self.root: Process | None = None
        self.stats = TreeStats()

    def attribute(self, events: Iterable[RawEvent]) -> Iterator[Attributed]:
        """Yield the run's own events with their threads, in input order."""
        for e in events:
            attributed = self.attribute_one(e)
            if attributed is not None:
                yield attributed

    def attribute_one(self, e: RawEvent) -> Attributed | None:
        """The next event in ring order with its thread, or None when it is not the run's."""
        hook = e.hook
        if hook == HOOK_NEWTASK:
            return self._on_newtask(e)
        if hook in (HOOK_SIGNAL, HOOK_CGROUP_ATTACH):
            # written in the sender's (mover's) context: it belongs to its target
            target = self._tasks.get(e.a1 if hook == HOOK_SIGNAL else e.a0)
            return Attributed(e, target) if target else None
        if hook == HOOK_EXEC and e.a0 != e.tid and e.a0 in self._tasks:
            # a non-leader thread exec'd: it takes over the leader's id
            self._tasks[e.tid] = self._tasks.pop(e.a0)
        thread = self._tasks.get(e.tid)
        if thread:
            return Attributed(e, thread)
        self._unowned(e)
        return None

    @property
    def tasks(self) -> dict[int, Thread]:
        """Live run threads by host id (the same dict for the whole walk: the scan's fast path
        reads it for records that cannot change the tree, normalizer/scan.py)."""
        return self._tasks

    def thread_of(self, tid: int) -> Thread | None:
        """The run's live thread with host id `tid`, if any."""
        return self._tasks.get(tid)

    def _unowned(self, e: RawEvent) -> None:
        if e.tgid not in self._control:
            self.stats.unattributed_events += 1

    def _on_newtask(self, e: RawEvent) -> Attributed | None:
        child_tid = e.a0
        if e.tgid == self._shim and self.root is None:
            self.root = _new_process(None)
            self.stats.root_seen = True
            self._tasks[child_tid] = self.root.main
            return None
        parent = self._tasks.get(e.tid)
        if parent is None:
            self._unowned(e)
            return None
        if e.a1 & CLONE_THREAD:
            thread = Thread(parent.process)
            parent.child_threads.append(thread)
            self._tasks[child_tid] = thread
            return Attributed(e, parent)
        proc = _new_process(parent.process)
        parent.child_processes.append(proc)
        self._tasks[child_tid] = proc.main
        return Attributed(e, parent, spawned=proc)


def _threads_in_order(thread: Thread) -> Iterator[Thread]:
    yield thread
    for child in thread.child_threads:
        yield from _threads_in_order(child)


def number_tree(root: Process | None) -> list[Process]:
    """Give every process its canonical number and every thread its rank.

    Returns the processes in number order.
    """
    if root is None:
        return []
    ordered: list[Process] = []
    counter = 0
    stack = [root]
    while stack:
        proc = stack.pop()
        counter += 1
        proc.number = counter
        ordered.append(proc)
        children: list[Process] = []
        for rank, thread in enumerate(proc.threads()):
            thread.rank = rank
            children.extend(thread.child_processes)
        stack.extend(reversed(children))
    return ordered
