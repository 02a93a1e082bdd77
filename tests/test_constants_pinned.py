"""Every constant the C pieces copy from Python (or the BPF header) is pinned to its source.

The C files cannot import Python, so each copy is a `#define`; this pure test
parses them and compares each with the one definition it copies. The BPF
header (ebpf/assay_events.h) and ebpf/wire.py must define the same hook ids,
truncation bits and run slots, name for name.
"""

from __future__ import annotations

import errno
import os
import re
import resource

import pytest

from ebpf import wire
from normalizer.artifacts import RUN_ID_MAX
from runner.capture.status import REFRESH_S
from runner.daemon import protocol
from spool import format as spool_format
from tests.support import ROOT

DEFINE = re.compile(r"^#define\s+([A-Z_][A-Z0-9_]*)\s+(.+?)\s*(?:/\*.*)?$", re.M)


def defines(relpath: str) -> dict[str, str]:
    return {name: value.strip() for name, value in DEFINE.findall((ROOT / relpath).read_text())}


def c_value(text: str) -> float:
    """A #define's value: decimal, octal (leading 0), a shift, a cast, a float."""
    text = re.sub(r"\((?:Py_ssize_t|unsigned|int|long)\)", "", text).replace("u", "")
    text = re.sub(r"\b0([0-7]+)\b", r"0o\1", text)
    return eval(text, {"__builtins__": {}})  # digits, shifts, parentheses: our own files


HEADER_RUN_OFFSET = wire.HEADER.size - sum(
    wire.struct.calcsize("<" + c) for c in wire.HEADER.format[1 + wire.HEADER_FIELDS.index("run"):]
)

PINNED = [
    ("normalizer/fastscan.c", "HEADER_SIZE", wire.HEADER.size),
    ("normalizer/fastscan.c", "HOOK_OPEN", wire.HOOK_OPEN),
    ("normalizer/fastscan.c", "HOOK_CLOSE", wire.HOOK_CLOSE),
    ("normalizer/fastscan.c", "EACCES_RET", -errno.EACCES),
    ("normalizer/fastscan.c", "ENOENT_RET", -errno.ENOENT),
    ("normalizer/fastscan.c", "O_CREAT_BIT", os.O_CREAT),
    ("normalizer/fastscan.c", "O_EXCL_BIT", os.O_EXCL),
    ("normalizer/fastscan.c", "O_CLOEXEC_BIT", os.O_CLOEXEC),
    ("spool/framescan.c", "MAX_FRAME", spool_format.MAX_FRAME),
    ("ebpf/ringsink.c", "RINGSINK_SLOTS", wire.RUN_SLOTS),
    ("ebpf/ringsink.c", "RINGSINK_HDR", wire.HEADER.size),
    ("ebpf/ringsink.c", "RINGSINK_RUN_OFFSET", HEADER_RUN_OFFSET),
    ("runner/daemon/fastclient.c", "PROTOCOL_VERSION", protocol.VERSION),
    ("runner/daemon/fastclient.c", "DEFAULT_RINGBUF_PAGES", wire.DEFAULT_RINGBUF_PAGES),
    ("runner/daemon/fastclient.c", "RUN_ID_MAX", RUN_ID_MAX),
    ("runner/daemon/fastclient.c", "MAX_FRAME", protocol.MAX_FRAME),
    ("runner/daemon/fastclient.c", "REFRESH_S", REFRESH_S),
    ("runner/daemon/fastclient.c", "RLIMITS", 1 + max(getattr(resource, n) for n in dir(resource)
                                                      if n.startswith("RLIMIT_"))),  # RLIM_NLIMITS
]


@pytest.mark.parametrize(("path", "name", "expected"), PINNED, ids=lambda v: str(v))
def test_each_c_copy_equals_its_source(path: str, name: str, expected: float) -> None:
    found = defines(path)
    assert name in found, f"{path} no longer defines {name}: update this table"
    assert c_value(found[name]) == expected, f"{path} {name} = {found[name]}, the source says {expected}"


def test_the_bpf_header_and_wire_define_the_same_hooks_bits_and_slots() -> None:
    header = {k: int(c_value(v)) for k, v in defines("ebpf/assay_events.h").items()
              if re.match(r"(HOOK_|TRUNC_|RUN_SLOTS$|ASSAY_DATA_MAX$|ARGV_MAX$)", k)}  # fmt: skip
    named = [k for k in dir(wire) if k in header or re.match(r"(HOOK_|TRUNC_)[A-Z0-9_]+$", k)]
    python = {k: getattr(wire, k) for k in named if isinstance(getattr(wire, k), int)}
    assert {k: v for k, v in header.items() if k in python} == python, "wire.py and assay_events.h differ"
    missing = sorted(k for k in header if k.startswith(("HOOK_", "TRUNC_")) and k not in python)
    assert missing == [], f"defined in assay_events.h but not in ebpf/wire.py: {missing}"


def test_the_parser_reads_what_the_files_write() -> None:
    """The table above cannot pass vacuously: each shape of value the files use parses to a number."""
    assert c_value("((Py_ssize_t)256 << 20)") == 256 << 20
    assert c_value("(1u << 20)") == 1 << 20
    assert c_value("02000000") == 0o2000000
    assert c_value("(-13)") == -13
    assert c_value("0.25") == 0.25
    assert len(PINNED) == len({(p, n) for p, n, _ in PINNED})
