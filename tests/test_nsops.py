"""Namespace and change-surface lines from raw records, and the health they lead to (no kernel)."""

from __future__ import annotations

from dataclasses import replace

from ebpf.wire import HOOK_MOUNT, HOOK_NEWTASK, HOOK_SETNS, HOOK_UNSHARE, HOOK_UTIMES
from normalizer.decode import RawEvent
from normalizer.health import CaptureFacts, cgroup_correlation, observation_health
from normalizer.nsops import NamespaceWatch, flag_names
from normalizer.paths import PathResolver
from normalizer.tree import TreeBuilder

SHIM, CMD = 10, 11


def _raw(hook: int, tid: int, ret: int = 0, a0: int = 0, a1: int = 0, a2: int = 0, a3: int = 0,
         data: bytes = b"", arrival: int = 0) -> RawEvent:
    return RawEvent(0, tid, tid, hook, ret, a0, a1, a2, a3, data, 0, arrival)


def _watch(*events: RawEvent) -> tuple[NamespaceWatch, list[tuple[str, str | None]]]:
    tree = TreeBuilder([], SHIM)
    resolver = PathResolver("/work", tree.thread_of)
    watch = NamespaceWatch()
    out = []
    for item in tree.attribute([_raw(HOOK_NEWTASK, SHIM, a0=CMD), *events]):
        r = resolver.resolve(item)
        lines = watch.spawned(r, 0) if item.event.hook == HOOK_NEWTASK else watch.lines(r, 0)
        out += [(c.kind, c.value) for c in lines]
    return watch, out


def test_flag_names_keep_every_bit() -> None:
    assert flag_names(0x10020000) == "CLONE_NEWNS|CLONE_NEWUSER"
    assert flag_names(0x400) == "0x400"  # CLONE_FILES: not a namespace, still shown
    assert flag_names(0x20400, only_namespaces=True) == "CLONE_NEWNS"


def test_a_moved_process_and_its_later_children_are_counted() -> None:
    watch, lines = _watch(
        _raw(HOOK_UNSHARE, CMD, a0=0x10000000),  # a user namespace alone moves nothing
        _raw(HOOK_UNSHARE, CMD, ret=-1, a0=0x20000),  # a refused one neither: a 260 line
        _raw(HOOK_UNSHARE, CMD, a0=0x20000),
        _raw(HOOK_NEWTASK, CMD, a0=12),
        _raw(HOOK_MOUNT, CMD, a0=0x1000, data=b"home\0/usr/share/doc\0"),
    )
    assert lines == [("event_160", "CLONE_NEWUSER"), ("event_260", "CLONE_NEWNS"),
                     ("event_160", "CLONE_NEWNS"),
                     ("event_163", "/work/home"), ("event_164", "/usr/share/doc")]
    assert (len(watch.moved), watch.mount_changes) == (2, 1)


def test_clone_with_newns_moves_the_child_only_and_setns_0_counts() -> None:
    watch, lines = _watch(_raw(HOOK_NEWTASK, CMD, a0=12, a1=0x20000 | 17))
    assert lines == [("event_162", "CLONE_NEWNS")] and len(watch.moved) == 1
    for nstype in (0, 0x20000 | 0x10000000):  # any kind; a pidfd with NEWNS among others
        watch, lines = _watch(_raw(HOOK_SETNS, CMD, a0=3, a1=nstype))
        assert lines == [("event_161", None)] and len(watch.moved) == 1
    watch, _ = _watch(_raw(HOOK_SETNS, CMD, a0=3, a1=0x40000000))  # a network namespace only
    assert not watch.moved


def test_backdating_is_its_own_line() -> None:
    _, lines = _watch(_raw(HOOK_UTIMES, CMD, a0=-100 & 0xFFFFFFFF, a3=0, data=b"f\0"),
                      _raw(HOOK_UTIMES, CMD, a0=-100 & 0xFFFFFFFF, a3=1, data=b"f\0"))
    assert lines == [("event_174", "/work/f"), ("event_175", "/work/f")]


def test_moved_paths_and_unread_memory_in_health() -> None:
    base = CaptureFacts({}, {}, 1, 0, True, 0)
    assert cgroup_correlation(base) == "clean"
    for facts in (replace(base, moved_processes=1), replace(base, mount_changes=1)):
        health = observation_health("r", set(), 1, facts, [])
        assert health.cgroup_correlation == "partial"
        assert any(n.startswith("s3_path_namespace: ") for n in health.notes)
    facts = CaptureFacts({}, {}, 1, 0, True, 0, unread={"open": 2, "exec_argv": 1})
    health = observation_health("r", set(), 1, facts, [])
    assert "s2_unread_user_memory: exec_argv=1 open=2" in health.notes
