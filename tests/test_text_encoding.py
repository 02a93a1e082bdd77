"""The v0 byte encoding (normalizer/text.py): total, lossless, injective, terminal-safe.

Exhaustive over every byte string of up to two bytes and over three- and
four-byte strings of the bytes that matter (controls, `/`, `\\`, `x`, hex
digits, UTF-8 lead and continuation bytes, surrogate and overlong starts),
then through the normalizer on a recorded spool with hostile names added.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import msgspec
import pytest

from ebpf.wire import HEADER, HOOK_EXEC, HOOK_OPEN
from normalizer.build import normalize
from normalizer.paths import AT_FDCWD
from normalizer.text import TRUNCATED, escape_bytes, escape_os, os_path, unescape
from runner.evidence.archive import MANIFEST, build_manifest
from runner.evidence.validate import validate_members
from spool.format import read_spool

DATA = Path(__file__).parent / "data"
INTERESTING = bytes([0x00, 0x0A, 0x1B, 0x2F, 0x30, 0x5C, 0x61, 0x78, 0x7F, 0x80, 0x9B, 0xA9,
                     0xBF, 0xC0, 0xC2, 0xC3, 0xE2, 0xED, 0xF0, 0xF4, 0xFF])
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def small_cases() -> list[bytes]:
    cases = [bytes(c) for n in range(3) for c in itertools.product(range(256), repeat=n)]
    cases += [bytes(c) for c in itertools.product(INTERESTING, repeat=3)]
    cases += [bytes(c) for c in itertools.product(INTERESTING[:12], repeat=4)]
    return cases


@pytest.fixture(scope="module")
def encoded() -> dict[bytes, str]:
    return {raw: escape_bytes(raw) for raw in small_cases()}


def test_lossless_every_small_case(encoded: dict[bytes, str]) -> None:
    assert [raw for raw, text in encoded.items() if unescape(text) != raw] == []


def test_injective_every_small_case(encoded: dict[bytes, str]) -> None:
    assert len(set(encoded.values())) == len(encoded)


def test_values_are_json_text_without_control_characters(encoded: dict[bytes, str]) -> None:
    assert [t for t in encoded.values() if RAW_CONTROL.search(t)] == []
    for text in encoded.values():  # any surrogate would make this raise
        msgspec.json.encode(text)


def test_the_truncation_marker_is_never_a_name(encoded: dict[bytes, str]) -> None:
    assert [t for t in encoded.values() if TRUNCATED in t] == []
    assert escape_bytes(b"/a\xff", truncated=True) == "/a\\xff" + TRUNCATED
    assert unescape("/a\\xff" + TRUNCATED) == b"/a\xff"


@pytest.mark.parametrize(("raw", "text"), [
    (b"/tmp/caf\xc3\xa9", "/tmp/café"),          # valid UTF-8 stays as it is
    (b"/tmp/\xff", "/tmp/\\xff"),                  # an invalid byte
    (b"a\\xff", "a\\\\xff"),                       # a literal backslash, not an escape
    (b"a\nhealth: x", "a\\x0ahealth: x"),          # C0 control
    (b"\x1b[2J", "\\x1b[2J"),                      # ESC
    (b"\xc2\x9b", "\\xc2\\x9b"),                   # C1 control (CSI), valid UTF-8 but escaped
    (b"\xed\xa0\x80", "\\xed\\xa0\\x80"),          # an encoded surrogate is not UTF-8
    (b"\xc0\xaf", "\\xc0\\xaf"),                   # overlong '/' is not UTF-8
])
def test_documented_examples(raw: bytes, text: str) -> None:
    assert escape_bytes(raw) == text
    assert unescape(text) == raw


def test_os_strings_round_trip() -> None:
    name = b"/tmp/\xff\n".decode("utf-8", "surrogateescape")
    assert escape_os(name) == "/tmp/\\xff\\x0a"
    assert os_path(escape_os(name)) == name


@pytest.mark.parametrize("bad", ["a\\b", "a\\", "\\x4"])
def test_text_the_rule_cannot_produce_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a v0-encoded value"):
        unescape(bad)


def _open_record(tgid: int, name: bytes, truncated: bool = False, ret: int = 3) -> bytes:
    flags = 0o101  # O_WRONLY|O_CREAT
    head = HEADER.pack(10**15, tgid, tgid, HOOK_OPEN, len(name), int(truncated), 0, ret,
                       AT_FDCWD & 0xFFFFFFFF, flags, 0o644, 0)
    return head + name


HOSTILE = [b"\xff", b"\xfe", b"a\nhealth: kernel_layer=complete", b"\x1b[2Jx", b"back\\xff",
           b"/tmp/\xc3\xa9", b"\xc2\x9b31m"]


def test_hostile_names_through_the_normalizer() -> None:
    """Non-UTF-8 and control-character names: a valid archive, lossless and distinct values."""
    spool = read_spool(DATA / "example.spool")
    records = list(spool.records)
    root = next(HEADER.unpack_from(r)[1] for r in records if HEADER.unpack_from(r)[3] == HOOK_EXEC)
    long_a = b"/" + b"d" * 4200
    long_b = b"/" + b"d" * 4200 + b"-other"
    cut = 4095  # the kernel's capture limit, NUL included
    extra = [_open_record(root, name) for name in HOSTILE]
    extra += [_open_record(root, long_a[:cut], truncated=True, ret=-36),
              _open_record(root, long_b[:cut], truncated=True, ret=-36)]
    hostile = msgspec.structs.replace(spool, records=records + extra)
    run = normalize(hostile)
    members = {k: v if isinstance(v, bytes) else v.read_bytes() for k, v in run.members().items()}
    assert validate_members({MANIFEST: build_manifest(run.run_id, run.members()), **members}) == []

    values = [e.value for e in run.kernel_events if e.kind == "openat"]
    workdir = b"/tmp/rec/work/sub/"  # the recorded command's cwd when it exited
    for name in HOSTILE:
        full = name if name.startswith(b"/") else workdir + name
        assert escape_bytes(full) in values
        assert unescape(escape_bytes(full)) == full
    hostile_values = [escape_bytes(n if n.startswith(b"/") else workdir + n) for n in HOSTILE]
    assert len(set(hostile_values)) == len(HOSTILE)
    assert [v for v in values if v is None or RAW_CONTROL.search(v)] == []
    truncated = [v for v in values if v is not None and v.endswith(TRUNCATED)]
    assert truncated == [escape_bytes(long_a[:cut], truncated=True)] * 2
    assert "s2_path_capture: truncated_paths=2" in run.health.notes

