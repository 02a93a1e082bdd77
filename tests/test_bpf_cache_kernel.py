"""The compiled-object cache and the loader that replaces BCC's at run time (ebpf/bpfobject.py,
ebpf/loader.py): what BCC compiled, loaded without it, behaves as BCC's own load; the cache is
used only when it is root's alone, and a bad file is compiled again, never loaded."""

from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path

import msgspec
import pytest

from ebpf import bpfobject
from ebpf.bpfobject import BpfObject, compile_with_bcc, compiled
from ebpf.loader import LoadedObject, decode_type
from ebpf.monitor import Monitor, MonitorConfig
from runner.host.checks import warm_monitor

pytestmark = pytest.mark.kernel

COUNTER = """
BPF_ARRAY(hits, u64, 1);
BPF_HASH(last, u32, struct pair, 16);
TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
    if ((bpf_get_current_pid_tgid() >> 32) != WATCHED) return 0;
    int zero = 0;
    u64 *n = hits.lookup(&zero);
    if (n) __sync_fetch_and_add(n, 1);
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct pair p = {.tid = tid, .calls = n ? *n : 0};
    last.update(&tid, &p);
    return 0;
}
"""
HEADER = "struct pair { u32 tid; u32 pad; u64 calls; };\n"


def _source() -> str:
    return HEADER + COUNTER


def _cflags() -> list[str]:
    return [f"-DWATCHED={os.getpid()}", "-g0"]


def test_an_object_loaded_without_bcc_counts_what_the_kernel_saw() -> None:
    obj = compile_with_bcc(_source(), _cflags())
    loaded = LoadedObject(obj)
    try:
        loaded.attach_tracepoint("syscalls", "sys_enter_getppid", "tracepoint__syscalls__sys_enter_getppid")
        for _ in range(7):
            os.getppid()
        thread = threading.Thread(target=os.getppid)
        thread.start()
        thread.join()
        hits = loaded.maps["hits"]
        assert hits[hits.Key(0)].value == 8
        last = {k.value: v.calls for k, v in loaded.maps["last"].items()}
        assert last[threading.get_native_id()] == 7
        assert last[thread.native_id] == 8
        assert set(last) == {threading.get_native_id(), thread.native_id}
        del loaded.maps["last"][loaded.maps["last"].Key(thread.native_id)]
        assert [k.value for k in loaded.maps["last"]] == [threading.get_native_id()]
    finally:
        loaded.close()


def test_compiling_twice_gives_the_same_object() -> None:
    """What is cached does not depend on the compile (map fds are names in the object)."""
    assert compile_with_bcc(_source(), _cflags()) == compile_with_bcc(_source(), _cflags())


def test_the_second_compile_comes_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "state" / "cache"  # no state directory yet: made as the first run needs it
    monkeypatch.setenv(bpfobject.CACHE_ENV, str(cache))
    first, hit = compiled(_source(), _cflags(), [])
    assert not hit
    assert cache.stat().st_mode & 0o777 == 0o700
    second, hit = compiled(_source(), _cflags(), [])
    assert hit and second == first
    _, hit = compiled(_source(), [*_cflags(), "-DOTHER=1"], [])
    assert not hit  # other flags, another object
    assert len(list(cache.glob("*.bpfo"))) == 2


def test_a_header_change_is_a_cache_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bpfobject.CACHE_ENV, str(tmp_path / "cache"))
    header = tmp_path / "pair.h"
    header.write_text(HEADER)
    text = f'#include "{header}"\n' + COUNTER
    assert not compiled(text, _cflags(), [header])[1]
    assert compiled(text, _cflags(), [header])[1]
    header.write_text(HEADER.replace("u32 pad;", "u32 spare;"))
    assert not compiled(text, _cflags(), [header])[1]


@pytest.mark.parametrize("spoil", ["group_writable", "other_owner", "garbage", "symlink"])
def test_a_cache_file_not_root_s_alone_or_not_an_object_is_compiled_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: str) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(bpfobject.CACHE_ENV, str(cache))
    good, _ = compiled(_source(), _cflags(), [])
    (path,) = cache.glob("*.bpfo")
    planted = msgspec.msgpack.encode(msgspec.structs.replace(good, programs=[]))  # would attach nothing
    if spoil == "symlink":
        target = tmp_path / "elsewhere.bpfo"
        target.write_bytes(planted)
        path.unlink()
        path.symlink_to(target)
    else:
        path.write_bytes(b"\x93not an object" if spoil == "garbage" else planted)
        if spoil == "group_writable":
            path.chmod(0o660)
        elif spoil == "other_owner":
            os.chown(path, 65534, 65534)
    obj, hit = compiled(_source(), _cflags(), [])
    assert not hit
    assert obj == good


def test_a_cache_directory_others_may_write_is_not_used(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    monkeypatch.setenv(bpfobject.CACHE_ENV, str(cache))
    assert not compiled(_source(), _cflags(), [])[1]
    assert not compiled(_source(), _cflags(), [])[1]
    assert not list(cache.iterdir())


def test_the_cache_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bpfobject.CACHE_ENV, "off")
    assert bpfobject.cache_dir() is None
    assert not compiled(_source(), _cflags(), [])[1]


def test_the_monitor_from_the_cache_is_the_monitor_bcc_compiles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached monitor and a fresh one: the same object, the same header layout, both attach."""
    monkeypatch.setenv(bpfobject.CACHE_ENV, str(tmp_path / "cache"))
    fresh = Monitor(MonitorConfig(ringbuf_pages=2), lambda _r: None)
    try:
        assert not fresh.from_cache
        fresh_layout = fresh.header_layout()
    finally:
        fresh.close()
    cached = Monitor(MonitorConfig(ringbuf_pages=2), lambda _r: None)
    try:
        assert cached.from_cache
        assert cached.header_layout() == fresh_layout
    finally:
        cached.close()


def test_doctor_fix_compiles_the_monitor_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`doctor --fix` fills the cache, so a first run loads instead of compiling; then nothing to do."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(bpfobject.CACHE_ENV, str(cache))
    assert list(warm_monitor()) == [f"compiled the eBPF monitor into {cache} (runs load it from there)"]
    assert list(warm_monitor()) == []
    monitor = Monitor(MonitorConfig(), lambda _r: None)
    try:
        assert monitor.from_cache
    finally:
        monitor.close()


def test_the_type_decoder_lays_out_every_monitor_map_as_bcc_does(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from bcc import BPF

    monkeypatch.setenv(bpfobject.CACHE_ENV, str(tmp_path / "cache"))
    Monitor(MonitorConfig(ringbuf_pages=1), lambda _r: None).close()
    (path,) = (tmp_path / "cache").glob("*.bpfo")
    obj = msgspec.msgpack.decode(path.read_bytes(), type=BpfObject)
    assert {m.name for m in obj.maps} >= {"rb", "tasks", "counts", "run_cgroups", "net_rules", "layout_probe"}
    for spec in obj.maps:
        for desc, size in ((spec.key_desc, spec.key_size), (spec.leaf_desc, spec.value_size)):
            ours, bccs = decode_type(json.loads(desc)), BPF._decode_table_type(json.loads(desc))
            assert _layout(ours) == _layout(bccs)
            if size:  # the ring buffer has none
                assert ctypes.sizeof(ours) == size


def _layout(t: type) -> list[tuple[str, int, int]] | int:
    """(field, offset, size), nested fields flattened; a scalar's size."""
    fields = getattr(t, "_fields_", None)
    if fields is None:
        return ctypes.sizeof(t)
    out: list[tuple[str, int, int]] = []
    for name, *_ in fields:
        field = getattr(t, name)
        out.append((name, field.offset, field.size))
    return out
