"""ebpf/btf.py: struct offsets and function ids from BTF, on a blob made by hand and on this kernel's."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from ebpf.btf import VMLINUX, Btf, BtfError

INT, STRUCT, UNION, TYPEDEF, FUNC = 1, 4, 5, 8, 12


def blob() -> bytes:
    """int; struct inner {int a; int b;}; struct outer {int x; union {struct inner in;}; int bits:3;};
    typedef struct outer outer_t; a FUNC security_file_open; an ENUM with two values in between."""
    names = b"\0int\0inner\0a\0b\0outer\0x\0in\0bits\0outer_t\0security_file_open\0e\0v\0"
    off = {n: names.index(b"\0" + n.encode() + b"\0") + 1 for n in
           ("int", "inner", "a", "b", "outer", "x", "in", "bits", "outer_t", "security_file_open", "e", "v")}

    def t(name: str | None, kind: int, vlen: int, ref: int, kind_flag: int = 0) -> bytes:
        return struct.pack("<III", off[name] if name else 0, kind << 24 | vlen | kind_flag << 31, ref)

    types = b"".join([
        t("int", INT, 0, 4) + struct.pack("<I", 32),  # 1
        t("inner", STRUCT, 2, 8) + struct.pack("<III", off["a"], 1, 0) + struct.pack("<III", off["b"], 1, 32),
        t(None, UNION, 1, 8) + struct.pack("<III", off["in"], 2, 0),  # 3
        t("e", 6, 2, 4) + struct.pack("<Ii", off["v"], 0) + struct.pack("<Ii", off["v"], 1),  # 4: enum
        t("outer", STRUCT, 3, 24, kind_flag=1) + struct.pack("<III", off["x"], 1, 0)
        + struct.pack("<III", 0, 3, 64) + struct.pack("<III", off["bits"], 1, 3 << 24 | 129),  # 5
        t("outer_t", TYPEDEF, 0, 5),  # 6
        t("security_file_open", FUNC, 0, 0),  # 7
    ])
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(names))
    return header + types + names


def test_offsets_follow_nested_and_anonymous_members() -> None:
    btf = Btf(blob())
    assert btf.offset("inner", "b") == 4
    assert btf.offset("outer", "in") == 8  # through the anonymous union
    assert btf.offset("outer", "in.b") == 12
    assert btf.func_id("security_file_open") == 7


@pytest.mark.parametrize(("struct_name", "member"), [("outer", "bits"), ("outer", "nope"), ("nope", "x"),
                                                     ("inner", "a.b")])
def test_what_cannot_be_an_offset_is_an_error(struct_name: str, member: str) -> None:
    with pytest.raises(BtfError):
        Btf(blob()).offset(struct_name, member)


def test_a_blob_that_is_not_btf_is_an_error() -> None:
    with pytest.raises(BtfError):
        Btf(b"\0" * 32)
    with pytest.raises(BtfError):
        Btf.kernel(Path("/nonexistent/vmlinux"))


def test_this_kernels_btf_has_what_the_kernel_path_program_reads() -> None:
    from ebpf.kpaths import FUNCTION, OFFSETS, USER_MEMORY, probe

    if not VMLINUX.exists():  # no BTF: no kernel paths, and the probe says why
        assert (probe().source, "cannot read" in probe().why) == (USER_MEMORY, True)
        return
    btf = Btf.kernel()
    assert btf.func_id(FUNCTION) > 0
    offsets = {name: btf.offset(s, m) for name, (s, m) in OFFSETS.items()}
    assert offsets["FILE_F_PATH"] != offsets["FILE_F_INODE"] and all(v >= 0 for v in offsets.values())


@pytest.mark.kernel
def test_the_kernel_facts_are_read_once_per_boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-BTF parse is paid by the boot's first run; later runs read the cache (root's)."""
    from ebpf import kpaths

    if not VMLINUX.exists():  # no BTF: nothing to read, nothing kept
        assert kpaths.probe().source == kpaths.USER_MEMORY
        return
    monkeypatch.setenv("ASSAY_RUNNER_BPF_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir(mode=0o700)
    (tmp_path / "cache" / "kpaths-an-earlier-boot.json").write_text("[1,[]]")
    facts = kpaths.kernel_facts()
    [kept] = (tmp_path / "cache").glob("kpaths-*.json")
    assert kept.name == f"kpaths-{kpaths.BOOT_ID.read_text().strip()}.json"
    assert kpaths.kernel_facts() == facts
    forged = (7, tuple(f"-D{name}=1" for name in kpaths.OFFSETS))
    kept.write_text(json.dumps(forged))  # what is cached is what is used
    assert kpaths.kernel_facts() == forged
    kept.write_text("[7,[\"-DFILE_F_PATH=1\"]]")  # an older runner's, lacking offsets: read again
    assert kpaths.kernel_facts() == facts
    kept.write_text("not json")  # a bad file is parsed again
    assert kpaths.kernel_facts() == facts
