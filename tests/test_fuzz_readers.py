"""Property-based fuzzing of the readers of untrusted bytes: archives, NDJSON lines, spools.

The only allowed outcomes are a clean result or the project's own error
(ArchiveError, SpoolError, the normalizer's DecodeError); anything else
escaping is a bug. Example counts come from the profile in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import tarfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from normalizer.build import normalize
from normalizer.decode import DecodeError
from runner.evidence.archive import MANIFEST, load_members
from runner.evidence.bounded import ArchiveError, iter_line_blocks, iter_lines
from runner.evidence.validate import Report, validate_path
from spool.format import SpoolError, read_spool
from tests.bombs import GOLDEN, Entry, write_tar_gz

DATA = Path(__file__).resolve().parent / "data"
BLANK = b" \t\r\x0b\x0c"


def _golden_tar() -> bytes:
    members = load_members(GOLDEN)
    order = [MANIFEST, *sorted(n for n in members if n != MANIFEST)]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in order:
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            tar.addfile(info, io.BytesIO(members[name]))
    return raw.getvalue()


GOLDEN_TAR = _golden_tar()
EXAMPLE_SPOOL = (DATA / "example.spool").read_bytes()


def _model(data: bytes, limit: int) -> list[tuple[int, bytes | None]]:
    """What iter_lines must give: data.split(b"\\n") numbered, blank lines left out, each
    line from its first non-blank byte, None past `limit`."""
    out: list[tuple[int, bytes | None]] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        content = line.lstrip(BLANK)
        if content:
            out.append((number, content if len(content) <= limit else None))
    return out


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


LINE_BYTES = st.lists(st.sampled_from([b"\n", b" ", b"\t", b"\r", b"{}", b"x", b"\n\n", b"yyyyyy", b"\x0c"]),
                      max_size=60).map(b"".join)


@given(data=LINE_BYTES | st.binary(max_size=300), cuts=st.lists(st.integers(0, 400), max_size=8),
       limit=st.integers(1, 12))
@example(data=b" " * 20 + b"x", cuts=[5, 10, 15], limit=4)
@example(data=b"xxxxxxxx\n\nab", cuts=[3], limit=4)
def test_iter_lines_matches_splitting_whatever_the_chunking(data: bytes, cuts: list[int], limit: int) -> None:
    assert list(iter_lines(_chunked(data, cuts), limit)) == _model(data, limit)
    assert list(iter_lines([data], limit)) == _model(data, limit)


@given(data=LINE_BYTES | st.binary(max_size=300), cuts=st.lists(st.integers(0, 400), max_size=8))
def test_line_blocks_hold_whole_lines_at_their_numbers(data: bytes, cuts: list[int]) -> None:
    """Joined back with their numbers, the blocks are the stream's lines (none over the limit here)."""
    lines: dict[int, bytes] = {}
    for first, block in iter_line_blocks(_chunked(data, cuts), limit=1000):
        assert block is not None
        for offset, line in enumerate(block.split(b"\n")):
            lines[first + offset] = line
    expected = dict(enumerate(data.split(b"\n"), start=1))
    assert {n: v for n, v in lines.items() if v} == {n: v for n, v in expected.items() if v}


def _validate_bytes(tmp_path: Path, name: str, data: bytes) -> Report | None:
    path = tmp_path / name
    path.write_bytes(data)
    try:
        report = validate_path(path)
    except ArchiveError as exc:
        assert str(exc) and "\n" not in str(exc)
        return None
    assert report.valid == (report.problems == [])
    return report


MUTATION = st.lists(st.tuples(st.integers(0, len(GOLDEN_TAR) - 1), st.integers(0, 255)),
                    min_size=1, max_size=8)


@given(mutation=MUTATION, cut=st.none() | st.integers(0, len(GOLDEN_TAR)))
@example(mutation=[(124, ord("7"))], cut=None)  # a size field: the manifest declares less
@example(mutation=[(156, ord("L"))], cut=None)  # the manifest's header turned into a GNU long name
@example(mutation=[(156, ord("S"))], cut=None)  # a sparse member
@example(mutation=[(514, 0x80)], cut=None)  # manifest text not UTF-8: msgspec raised UnicodeDecodeError
def test_mutated_tar_inside_good_gzip_is_read_or_refused(tmp_path_factory, mutation, cut) -> None:
    tar = bytearray(GOLDEN_TAR)
    for offset, value in mutation:
        tar[offset] = value
    data = gzip.compress(bytes(tar[:cut]), mtime=0)
    _validate_bytes(tmp_path_factory.mktemp("tar"), "m.tar.gz", data)


GZ = gzip.compress(GOLDEN_TAR, mtime=0)


@given(mutation=st.lists(st.tuples(st.integers(0, len(GZ) - 1), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.none() | st.integers(0, len(GZ)))
def test_mutated_gzip_is_read_or_refused(tmp_path_factory, mutation, cut) -> None:
    gz = bytearray(GZ)
    for offset, value in mutation:
        gz[offset] = value
    _validate_bytes(tmp_path_factory.mktemp("gz"), "m.tar.gz", bytes(gz[:cut]))


@given(data=st.binary(max_size=2048))
def test_arbitrary_bytes_are_refused_as_an_archive(tmp_path_factory, data: bytes) -> None:
    _validate_bytes(tmp_path_factory.mktemp("raw"), "r.tar.gz", data)


@given(names=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=5),
       sizes=st.lists(st.integers(0, 64), min_size=5, max_size=5))
@example(names=["a/../../b"], sizes=[1, 0, 0, 0, 0])
def test_any_member_names_and_sizes_are_read_or_refused(tmp_path_factory, names: list[str],
                                                        sizes: list[int]) -> None:
    """Names of any characters (long ones become GNU long names), stale manifests, dupes."""
    members = load_members(GOLDEN)
    entries = [Entry(MANIFEST, members[MANIFEST])]
    entries += [Entry(name, b"x" * size) for name, size in zip(names, sizes, strict=False)]
    path = write_tar_gz(tmp_path_factory.mktemp("names") / "n.tar.gz", entries)
    _validate_bytes(path.parent, path.name, path.read_bytes())


def _read_spool_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "s.spool"
    path.write_bytes(data)
    try:
        spool = read_spool(path)
    except SpoolError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    with contextlib.suppress(SpoolError, DecodeError):
        normalize(spool)


@given(mutation=st.lists(st.tuples(st.integers(0, len(EXAMPLE_SPOOL) - 1), st.integers(0, 255)),
                         min_size=1, max_size=6),
       cut=st.none() | st.integers(0, len(EXAMPLE_SPOOL)))
@example(mutation=[(354, 10)], cut=None)  # a tag with a newline: msgspec quoted it into a two-line error
def test_mutated_spool_is_read_or_refused(tmp_path_factory, mutation, cut) -> None:
    data = bytearray(EXAMPLE_SPOOL)
    for offset, value in mutation:
        data[offset] = value
    _read_spool_bytes(tmp_path_factory.mktemp("spool"), bytes(data[:cut]))


@given(data=st.binary(max_size=512))
@example(data=b"\xff\xff\xff\xff")
@example(data=b"\x10\x00\x00\x00" + b"\xc1" * 16)
@example(data=b"\x13\x00\x00\x00\x82\xa4type\xa5phase\xa4name\xa1\x80")  # not UTF-8: UnicodeDecodeError
def test_arbitrary_bytes_are_refused_as_a_spool(tmp_path_factory, data: bytes) -> None:
    _read_spool_bytes(tmp_path_factory.mktemp("spool"), data)
