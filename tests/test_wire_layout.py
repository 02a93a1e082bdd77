"""The Python decoder and the C record header must agree byte for byte."""

from __future__ import annotations

import struct

import pytest

from ebpf.monitor import Monitor, MonitorConfig
from ebpf.wire import HEADER, HEADER_FIELDS
from runner.capture.cgroup import RunCgroup

pytestmark = pytest.mark.kernel


def python_layout() -> list[tuple[str, int, int]]:
    """(field, offset, size) implied by the struct format string."""
    out, offset = [], 0
    for name, code in zip(HEADER_FIELDS, HEADER.format.lstrip("<"), strict=True):
        size = struct.calcsize("<" + code)
        out.append((name, offset, size))
        offset += size
    return out


def test_header_layout_matches_clang() -> None:
    cgroup = RunCgroup.create("layout-test")
    monitor = Monitor(MonitorConfig(ringbuf_pages=1), lambda _r: None)
    try:
        assert monitor.header_layout() == python_layout()
        assert HEADER.size == 64
    finally:
        monitor.close()
        cgroup.remove()
