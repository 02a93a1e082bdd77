"""Pure stages of the lineage tracking's kernel half, fed with recorded raw events.

The kernel tests run the attacks; these pin the normalizer's decisions on
the edges the attacks do not reach: moves that are not escapes, fd numbers
reused after a close, and how a process's end is read.
"""

from __future__ import annotations

from ebpf.wire import (
    HOOK_CGROUP_ATTACH,
    HOOK_CLOSE,
    HOOK_CLOSE_RANGE,
    HOOK_DUP,
    HOOK_EXIT,
    HOOK_NEWTASK,
    HOOK_OPEN,
    HOOK_PROC_EXIT,
    HOOK_SIGNAL,
)
from normalizer.decode import RawEvent
from normalizer.escape import EscapeWatch
from normalizer.execlog import ExitStatus, exec_log_of
from normalizer.health import CaptureFacts, cgroup_correlation
from normalizer.paths import PathResolver, Resolved
from normalizer.tree import TreeBuilder

SHIM, CMD = 10, 100
O_PATH = 0o10000000


def _raw(hook: int, tid: int = CMD, a0: int = 0, a1: int = 0, a2: int = 0, a3: int = 0,
         data: bytes = b"", ret: int = 0) -> RawEvent:
    return RawEvent(0, tid, tid, hook, ret, a0, a1, a2, a3, data, 0, 0)


def _resolve(events: list[RawEvent]) -> tuple[list[str | None], PathResolver]:
    """Opens' resolved paths, in order, for a command started by the shim."""
    tree = TreeBuilder([], SHIM)
    resolver = PathResolver("/work", tree.thread_of)
    paths = []
    for item in tree.attribute([_raw(HOOK_NEWTASK, SHIM, a0=CMD), *events]):
        r = resolver.resolve(item)
        if item.event.hook == HOOK_OPEN:
            paths.append(r.path)
    return paths, resolver


def test_reopen_of_a_closed_and_reused_fd_is_unknown() -> None:
    paths, resolver = _resolve([
        _raw(HOOK_OPEN, a0=-100, a1=O_PATH, data=b"/secret\0", ret=3),
        _raw(HOOK_CLOSE, a0=3),
        _raw(HOOK_OPEN, a0=-100, a1=1, data=b"/proc/self/fd/3\0", ret=-6),
    ])
    assert paths == ["/secret", "/proc/self/fd/3"]  # kept as written, never the old file
    assert resolver.unresolved_reopens == 1


def test_reopen_follows_dup_and_close_range() -> None:
    paths, _ = _resolve([
        _raw(HOOK_OPEN, a0=-100, a1=O_PATH, data=b"/t\0", ret=3),
        _raw(HOOK_DUP, a0=3, a1=-1, ret=7),
        _raw(HOOK_CLOSE_RANGE, a0=3, a1=3),
        _raw(HOOK_OPEN, a0=-100, a1=1, data=b"/dev/fd/7\0", ret=4),
        _raw(HOOK_OPEN, a0=-100, a1=1, data=b"/proc/self/fd/3\0", ret=-2),
        _raw(HOOK_OPEN, a0=-100, a1=0, data=b"/proc/%d/task/%d/fd/7/x\0" % (CMD, CMD), ret=-20),
    ])
    assert paths == ["/t", "/t", "/proc/self/fd/3", "/t/x"]


def test_only_moves_out_of_the_run_subtree_on_cgroup_v2_are_escapes() -> None:
    watch = EscapeWatch("/assay-runner/run-1")
    tree = TreeBuilder([], SHIM)
    events = [
        _raw(HOOK_NEWTASK, SHIM, a0=CMD),
        _raw(HOOK_CGROUP_ATTACH, 1, a0=CMD, data=b"/assay-runner/run-1/sub\0"),  # inside: not one
        _raw(HOOK_CGROUP_ATTACH, 1, a0=CMD, data=b"/assay-runner/run-10\0"),  # a sibling: one
        _raw(HOOK_CGROUP_ATTACH, 1, a0=CMD, a3=3, data=b"/elsewhere\0"),  # cgroup v1: not one
        _raw(HOOK_NEWTASK, CMD, a0=200, a1=0x200000000 | 17),  # CLONE_INTO_CGROUP: one
        _raw(HOOK_CGROUP_ATTACH, 1, a0=999, data=b"/\0"),  # not a run task: not attributed
    ]
    lines = [c for item in tree.attribute(events) if (c := watch.classify(Resolved(item, None), 0))]
    assert [(c.kind, c.value) for c in lines] == [("event_110", "/assay-runner/run-10"), ("event_111", None)]
    assert (watch.migrations, watch.clone_into_cgroup) == (1, 1)


def test_escapes_and_untracked_tasks_make_correlation_partial() -> None:
    base = CaptureFacts({}, {}, 1, 0, True, 0)
    assert cgroup_correlation(base) == "clean"
    for extra in ({"cgroup_escapes": 1}, {"clone_into_cgroup": 1}, {"untracked_tasks": 1}):
        assert cgroup_correlation(CaptureFacts({}, {}, 1, 0, True, 0, **extra)) == "partial"


def _ends(*events: RawEvent):
    log = exec_log_of([_raw(HOOK_NEWTASK, SHIM, a0=CMD), *events], [], SHIM, "/work")
    return log.exits.get(1)


def test_how_a_process_ended() -> None:
    thread = _raw(HOOK_NEWTASK, CMD, a0=101, a1=0x10000)  # CLONE_THREAD
    signal = _raw(HOOK_SIGNAL, 1, a0=15, a1=CMD, a2=0)  # sent by someone else, to the command
    last_exit = _raw(HOOK_PROC_EXIT, 101)
    assert _ends(thread, signal, _raw(HOOK_EXIT, 101, a0=7, a1=1), last_exit) == ExitStatus("exited", 7)
    assert _ends(thread, signal, last_exit) == ExitStatus("signaled", 15)
    assert _ends(thread, signal, _raw(HOOK_EXIT, CMD, a0=256 + 3), last_exit) == ExitStatus("exited", 3)
    assert _ends(thread, last_exit) == ExitStatus("unknown", None)
    assert _ends(thread, _raw(HOOK_EXIT, CMD, a0=0)) is None  # still running when capture ended
