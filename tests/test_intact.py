"""`validate` says OK only on a whole file: every truncation, trailer flip and appended byte is exit 2.

Before the whole-stream check (runner/evidence/intact.py), an archive with
up to 20 bytes cut off its end, or a corrupted gzip CRC, passed `validate`:
the tar reader stops at the first end block and never reads the trailer.
The archive here is a real one: the SDK-and-policy golden written by the
runner's own archive writer (several deflate segments in one gzip member).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import msgspec
import pytest

from runner.cli.main import main
from runner.evidence.archive import MANIFEST, archive_bytes, load_members

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "golden" / "archive-sdk-policy"
TRAILER = 8
Capture = pytest.CaptureFixture[str]


def _archive() -> bytes:
    members = load_members(GOLDEN)
    run_id = msgspec.json.decode(members.pop(MANIFEST))["run_id"]
    return archive_bytes(run_id, members)


ARCHIVE = _archive()


def _validate(tmp_path: Path, data: bytes, capsys: Capture) -> tuple[int, str]:
    path = tmp_path / "a.tar.gz"
    path.write_bytes(data)
    code = main(["validate", str(path)])
    captured = capsys.readouterr()
    return code, captured.err


def test_the_whole_archive_validates(tmp_path: Path, capsys: Capture) -> None:
    assert _validate(tmp_path, ARCHIVE, capsys)[0] == 0


@pytest.mark.parametrize("cut", range(1, 65))
def test_every_truncation_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int) -> None:
    code, err = _validate(tmp_path, ARCHIVE[:-cut], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("bit", range(TRAILER * 8))
def test_every_bit_flip_in_the_gzip_trailer_is_refused(tmp_path: Path, capsys: Capture,
                                                       bit: int) -> None:
    damaged = bytearray(ARCHIVE)
    damaged[len(damaged) - TRAILER + bit // 8] ^= 1 << bit % 8
    code, err = _validate(tmp_path, bytes(damaged), capsys)
    assert code == 2, err
    field = "CRC32" if bit < 32 else "ISIZE"
    assert f"the gzip trailer's {field}" in err, err


@pytest.mark.parametrize("tail", [b"\0", b"\0" * 512, b"junk", zlib.compress(b"x", wbits=31)],
                         ids=["one-zero", "zero-block", "garbage", "second-member"])
def test_anything_after_the_gzip_member_is_refused(tmp_path: Path, capsys: Capture,
                                                   tail: bytes) -> None:
    code, err = _validate(tmp_path, ARCHIVE + tail, capsys)
    assert code == 2, err
    assert f"bytes follow the end of the gzip stream at byte {len(ARCHIVE)}" in err, err


def _recompressed(tar: bytes) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return z.compress(tar) + z.flush()


def _tar() -> bytes:
    return zlib.decompress(ARCHIVE, wbits=31)


def _end(tar: bytes) -> int:
    """Uncompressed offset of the first end-of-archive block."""
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.getmembers()
        return t.offset


def test_a_tar_without_its_end_blocks_is_refused(tmp_path: Path, capsys: Capture) -> None:
    """A gzip stream that is whole in itself, around a tar cut at its last member."""
    tar = _tar()
    code, err = _validate(tmp_path, _recompressed(tar[:_end(tar)]), capsys)
    assert code == 2, err
    assert "the tar end-of-archive blocks are missing" in err, err


def test_a_byte_hidden_after_the_end_blocks_is_refused(tmp_path: Path, capsys: Capture) -> None:
    tar = bytearray(_tar())
    at = _end(bytes(tar)) + 3 * tarfile.BLOCKSIZE
    tar[at] = 0x41
    code, err = _validate(tmp_path, _recompressed(bytes(tar)), capsys)
    assert code == 2, err
    assert f"non-zero byte 0x41 after the end of the tar archive at uncompressed byte {at}" in err, err


def test_a_byte_hidden_in_member_padding_is_refused(tmp_path: Path, capsys: Capture) -> None:
    """Padding is read past by tar and covered by no digest: it must be zero too."""
    tar = bytearray(_tar())
    with tarfile.open(fileobj=io.BytesIO(bytes(tar))) as t:
        info = next(i for i in t.getmembers() if i.size % tarfile.BLOCKSIZE)
    at = info.offset_data + info.size
    tar[at] = 0x7F
    code, err = _validate(tmp_path, _recompressed(bytes(tar)), capsys)
    assert code == 2, err
    assert f"non-zero byte 0x7f in a member's padding at uncompressed byte {at}" in err, err


def test_the_cli_refuses_a_damaged_file_in_one_line(tmp_path: Path) -> None:
    """The real entry point: exit 2, one line on stderr, nothing on stdout."""
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(ARCHIVE[:-20])
    run = subprocess.run([sys.executable, "-m", "runner.cli.main", "validate", str(path)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "damaged" in run.stderr or "ended before the end-of-stream" in run.stderr, run.stderr
