"""The memoized kernel-line writer gives exactly the bytes of encoding each whole line."""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from normalizer import kernel_lines
from normalizer.classify import Classified, open_meta
from normalizer.kernel_lines import KernelLayer, KernelLines, join_lines, kernel_event

_encoder = msgspec.json.Encoder()


def _events() -> list[Classified]:
    metas = [open_meta(0, 0, 0, 3), open_meta(0o1 | 0o100 | 0o1000, 0o644, 0, 4), open_meta(0o2, 0, 0, -2),
             open_meta(0o2 | 0o100 | 0o200, 0o600, 0, -13), open_meta(0o20200000 | 0o2, 0o600, 5, 0)]
    values = ["/w/a", "/w/\\x01b\\xff", "/w/\u00e9\u4e2d", "127.0.0.1:80", None, '/w/"quoted"']
    out = []
    for i, (kind, event_type) in enumerate([("openat", 1), ("exec", 4), ("connect", 2), ("file_blocked", 10),
                                            ("event_120", 120), ("event_6", 6)]):
        for j, value in enumerate(values):
            meta = metas[(i + j) % len(metas)] if kind in ("openat", "file_blocked") else None
            out.append(Classified(event_type, kind, value, meta, order=i * 10 + j, ts=i))
    return out


def _line(lines: KernelLines, seq: int, pid: int, tail: bytes) -> bytes:
    """One whole line, as the writer splices it."""
    return join_lines(lines.head, seq, b',"pid":%d,' % pid, [tail])


@pytest.mark.parametrize("run_id", ["r", "run_minimal-2"])
def test_lines_are_the_encoded_events(run_id: str) -> None:
    lines = KernelLines(run_id)
    events = _events() * 3
    for seq, c in enumerate(events):
        pid = seq % 7 + 1
        expected = _encoder.encode(kernel_event(run_id, seq, c, pid)) + b"\n"
        assert _line(lines, seq, pid, lines.tail(c, c.value)) == expected


def test_the_value_given_is_the_one_written() -> None:
    """The writer takes the final (substituted, redacted) value, not the event's raw one."""
    c = _events()[0]
    lines = KernelLines("r")
    line = _line(lines, 0, 1, lines.tail(c, "/w/~1"))
    assert msgspec.json.decode(line)["value"] == "/w/~1"


def test_block_writes_change_no_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_lines, "LINES_PER_WRITE", 5)
    lines, layer, expected = KernelLines("r"), KernelLayer(), b""
    for seq, c in enumerate(_events() * 2):
        layer.write_line(_line(lines, seq, 2, lines.tail(c, c.value)))
        expected += _encoder.encode(kernel_event("r", seq, c, 2)) + b"\n"
    assert layer.read_bytes() == expected
    assert layer.size == len(expected) and layer.count == len(_events()) * 2
    assert layer.sha256 == hashlib.sha256(expected).hexdigest()


def test_bulk_tails_are_the_single_tails() -> None:
    """`tails` (frames looked up once per metadata) gives what `tail` gives for each event."""
    events = _events() * 2
    lines = KernelLines("r")
    expected = [KernelLines("r").tail(c, c.value) for c in events]
    assert lines.tails(events, [c.value for c in events]) == expected
