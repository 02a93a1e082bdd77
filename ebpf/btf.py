"""The running kernel's own type information (BTF, /sys/kernel/btf/vmlinux), read without libbpf.

The kernel-path program (ebpf/kpath.c) reads a few fields of `struct file`,
`struct inode`, the task's namespaces; the kernel headers on our machines need
not match the running kernel, so their offsets are taken from the kernel's BTF
instead and compiled in (`-D` flags): what the kernel says its layout is, not
what a header assumed. A fentry program is also attached by the BTF id of the
function it runs on (`func_id`).

Only what those two questions need is parsed: type kinds, names, and the
members of structs and unions (anonymous members are searched through, as C
lets a name reach into them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

VMLINUX = Path("/sys/kernel/btf/vmlinux")
MAGIC = 0xEB9F
KIND_STRUCT, KIND_UNION, KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT = 4, 5, 8, 9, 10, 11
KIND_FUNC, KIND_TYPE_TAG = 12, 18
_QUALIFIERS = frozenset({KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_TYPE_TAG})
_EXTRA = {1: lambda v: 4, 3: lambda v: 12, 4: lambda v: 12 * v, 5: lambda v: 12 * v, 6: lambda v: 8 * v,
          13: lambda v: 8 * v, 14: lambda v: 4, 15: lambda v: 12 * v, 17: lambda v: 4, 19: lambda v: 12 * v}
"""Bytes of kind-specific data after a type's 12-byte header, by kind (vlen -> bytes)."""


class BtfError(RuntimeError):
    """The BTF is missing, malformed, or lacks a type or member asked for."""


@dataclass(frozen=True)
class _Type:
    name: str
    kind: int
    ref: int
    """size_or_type: the referenced type for qualifiers, pointers and functions."""
    members: tuple[tuple[str, int, int], ...]
    """(name, type id, bit offset) for structs and unions."""


class Btf:
    """The types of one BTF blob (the kernel's, by default)."""

    def __init__(self, blob: bytes) -> None:
        if len(blob) < 24:
            raise BtfError("BTF too short")
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(
            "<HBBIIIII", blob)
        if magic != MAGIC:
            raise BtfError("not BTF (bad magic)")
        strings = blob[hdr_len + str_off:hdr_len + str_off + str_len]
        self._types: list[_Type | None] = [None]  # id 0 is void
        self._by_name: dict[tuple[str, int], int] = {}
        pos, end = hdr_len + type_off, hdr_len + type_off + type_len
        while pos < end:
            name_off, info, ref = struct.unpack_from("<III", blob, pos)
            kind, vlen, kind_flag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            pos += 12
            members: tuple[tuple[str, int, int], ...] = ()
            if kind in (KIND_STRUCT, KIND_UNION):
                members = tuple(
                    (_name(strings, m_name), m_type, m_off & 0xFFFFFF if kind_flag else m_off)
                    for m_name, m_type, m_off in struct.iter_unpack("<III", blob[pos:pos + 12 * vlen]))
            extra = _EXTRA.get(kind)
            pos += extra(vlen) if extra else 0
            name = _name(strings, name_off)
            self._by_name.setdefault((name, kind), len(self._types))
            self._types.append(_Type(name, kind, ref, members))

    @classmethod
    def kernel(cls, path: Path = VMLINUX) -> Btf:
        try:
            return cls(path.read_bytes())
        except OSError as exc:
            raise BtfError(f"cannot read {path}: {exc.strerror}") from exc

    def func_id(self, name: str) -> int:
        """The BTF id of kernel function `name` (what a fentry program attaches to)."""
        found = self._by_name.get((name, KIND_FUNC))
        if found is None:
            raise BtfError(f"the kernel's BTF has no function {name}")
        return found

    def offset(self, struct_name: str, member_path: str) -> int:
        """Byte offset of `member_path` (`a.b.c`: members of nested structs) in `struct struct_name`."""
        type_id = self._by_name.get((struct_name, KIND_STRUCT))
        if type_id is None:
            raise BtfError(f"the kernel's BTF has no struct {struct_name}")
        total = 0
        for member in member_path.split("."):
            found = self._member(type_id, member)
            if found is None:
                raise BtfError(f"struct {struct_name} has no member {member_path}")
            type_id, bits = found
            if bits % 8:
                raise BtfError(f"{struct_name}.{member_path} is a bit field")
            total += bits // 8
        return total

    def _member(self, type_id: int, name: str) -> tuple[int, int] | None:
        """(type id, bit offset) of member `name` of a struct or union, looking into anonymous ones."""
        t = self._resolve(type_id)
        if t is None or t.kind not in (KIND_STRUCT, KIND_UNION):
            return None
        for m_name, m_type, m_bits in t.members:
            if m_name == name:
                return m_type, m_bits
            if not m_name:
                inner = self._member(m_type, name)
                if inner is not None:
                    return inner[0], m_bits + inner[1]
        return None

    def _resolve(self, type_id: int) -> _Type | None:
        """The type behind typedefs and qualifiers."""
        for _ in range(32):
            t = self._types[type_id] if 0 < type_id < len(self._types) else None
            if t is None or t.kind not in _QUALIFIERS:
                return t
            type_id = t.ref
        return None


def _name(strings: bytes, offset: int) -> str:
    end = strings.find(b"\0", offset)
    return strings[offset:end if end >= 0 else None].decode(errors="replace")
