"""Archive bombs and hostile spools are refused early, in bounded memory.

Each case runs the real CLI in a child process and reads that child's peak
RSS from wait4(2): the limit is 200 MiB, where the reader before these bounds
took 4.76 GB (512 MiB of newlines) and 3.1 GB (two 1 GiB members). A big
legitimate archive (200k kernel events) must still pass, so the bounds come
from the manifest's declared sizes and the documented caps
(runner/evidence/bounded.py, docs/artifacts.md "Reading limits").
"""

from __future__ import annotations

import random
import struct
import tarfile
from pathlib import Path

import msgspec
import pytest

from normalizer.build import normalize
from runner.evidence.archive import MANIFEST
from runner.evidence.bounded import MAX_HEADER_BYTES, MAX_TOTAL_BYTES
from runner.evidence.publish import publish
from spool.format import MAX_FRAME, Batch, Spool, encode_frame, read_spool
from tests.bombs import (
    GOLDEN,
    Entry,
    GiB,
    MiB,
    archive_replacing,
    digest,
    golden_members,
    manifest_with,
    measure_cli,
    repeated,
    write_tar_gz,
)

RSS_LIMIT_MIB = 200
DATA = Path(__file__).resolve().parent / "data"
SDK = "layers/sdk.ndjson"


def refused(tmp_path: Path, *args: str | Path, expect: str) -> None:
    """The command exits 2 with one line naming `expect`, under the RSS limit."""
    run = measure_cli(*args, cwd=tmp_path)
    assert run.returncode == 2, run.stderr[-2000:]
    assert expect in run.stderr, run.stderr[-2000:]
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr[-2000:]
    assert run.max_rss_mib < RSS_LIMIT_MIB, f"peak RSS {run.max_rss_mib:.0f} MiB"


def each_reader(tmp_path: Path, archive: Path, expect: str) -> None:
    """validate, diff (either side), show and report all refuse `archive` the same way."""
    refused(tmp_path, "validate", archive, expect=expect)
    refused(tmp_path, "diff", GOLDEN, archive, expect=expect)
    refused(tmp_path, "show", "--no-spool", archive, expect=expect)
    refused(tmp_path, "report", "--no-spool", archive, "-o", tmp_path / "r.html", expect=expect)
    assert not (tmp_path / "r.html").exists()


def test_newline_bomb_behind_a_stale_manifest_is_refused_at_its_header(tmp_path: Path) -> None:
    """The canonical bomb: a ~511 KB archive whose sdk layer inflates to 512 MiB of newlines."""
    archive = archive_replacing(tmp_path / "nl.tar.gz", {SDK: (512 * MiB, repeated(b"\n", 512 * MiB))})
    assert archive.stat().st_size < MiB
    declared = msgspec.json.decode(golden_members()[MANIFEST])["files"][SDK]["bytes"]
    each_reader(tmp_path, archive, f"member '{SDK}' is {512 * MiB} bytes, more than what manifest.json "
                                   f"declares ({declared} bytes)")


def test_newline_bomb_declared_honestly_streams_in_bounded_memory(tmp_path: Path) -> None:
    """The same 512 MiB declared with its true size and digest: blank lines are allowed by the
    contract, so it is read, but streamed, never held."""
    size = 512 * MiB
    manifest = manifest_with(golden_members(), {SDK: digest(repeated(b"\n", size))})
    archive = archive_replacing(tmp_path / "nl.tar.gz", {SDK: (size, repeated(b"\n", size))}, manifest)
    run = measure_cli("validate", archive, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.max_rss_mib < RSS_LIMIT_MIB, f"peak RSS {run.max_rss_mib:.0f} MiB"


def test_two_gib_of_zero_members_are_refused(tmp_path: Path) -> None:
    """Two 1 GiB zero members, first behind the golden manifest, then declared by it."""
    zeros = {name: (GiB, repeated(b"\0", GiB)) for name in ("events.ndjson", "layers/kernel.ndjson")}
    stale = archive_replacing(tmp_path / "zeros.tar.gz", zeros, level=1)
    each_reader(tmp_path, stale, "member 'events.ndjson' is 1073741824 bytes, more than what manifest.json")
    declared = manifest_with(golden_members(), {name: (GiB, "sha256:" + "0" * 64) for name in zeros})
    zeros = {name: (GiB, repeated(b"\0", GiB)) for name in zeros}
    honest = archive_replacing(tmp_path / "declared.tar.gz", zeros, declared, level=1)
    each_reader(tmp_path, honest, f"at most {MAX_TOTAL_BYTES}")


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE], ids=["gnu-long-name", "pax"])
def test_a_256_mib_name_header_is_refused_before_it_is_read(tmp_path: Path, kind: bytes) -> None:
    size = 256 * MiB
    members = golden_members()
    entries = [Entry(MANIFEST, members[MANIFEST]), Entry("././@LongLink", repeated(b"a", size), size, kind),
               Entry("events.ndjson", members["events.ndjson"])]
    archive = write_tar_gz(tmp_path / "name.tar.gz", entries)
    each_reader(tmp_path, archive, f"a {size}-byte long-name or pax header (at most {MAX_HEADER_BYTES}")


def test_an_over_long_line_is_a_problem_not_a_buffer(tmp_path: Path) -> None:
    """A 64 MiB line without a newline, declared honestly: reported on its line, never held."""
    size = 64 * MiB
    manifest = manifest_with(golden_members(), {SDK: digest(repeated(b"x", size))})
    archive = archive_replacing(tmp_path / "line.tar.gz", {SDK: (size, repeated(b"x", size))}, manifest)
    run = measure_cli("validate", archive, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{SDK}: line 1: longer than 1048576 bytes" in run.stdout
    assert run.max_rss_mib < RSS_LIMIT_MIB, f"peak RSS {run.max_rss_mib:.0f} MiB"


# --- hostile spools --------------------------------------------------------------------------


def _example() -> bytes:
    return (DATA / "example.spool").read_bytes()


def _with_prefix(size: int) -> bytes:
    return struct.pack("<I", size) + b"\0" * 64


HOSTILE_SPOOLS = {
    "huge length prefix": (lambda: _with_prefix(0xFFFFFFFF), "too large"),
    "length prefix past the end": (lambda: _with_prefix(MAX_FRAME), "torn frame at end of spool"),
    "truncated": (lambda: _example()[: len(_example()) * 2 // 3], "torn frame"),
    "garbage": (lambda: random.Random(10).randbytes(MiB), "not an assay-runner spool"),
    "undecodable frame": (lambda: struct.pack("<I", 16) + b"\xc1" * 16, "undecodable frame"),
    "no header first": (lambda: encode_frame(Batch(records=[b"x" * 64])) + _example(),
                        "does not start with a spool header"),
}


@pytest.mark.parametrize("case", HOSTILE_SPOOLS, ids=list(HOSTILE_SPOOLS))
def test_hostile_spool_is_refused(tmp_path: Path, case: str) -> None:
    make, expect = HOSTILE_SPOOLS[case]
    spool = tmp_path / "evil.spool"
    spool.write_bytes(make())
    out = tmp_path / "evil.tar.gz"
    refused(tmp_path, "normalize", spool, "--out", out, expect=expect)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.spool"]
    refused(tmp_path, "show", GOLDEN, "--spool", spool, expect=expect)


# --- a big legitimate archive still passes ---------------------------------------------------


def test_a_200k_event_archive_passes_every_reader(tmp_path: Path) -> None:
    """200,000 opens of one file (a flood compresses well: the ratio is no bound here)."""
    spool = read_spool(DATA / "example.spool")
    records = list(spool.records)
    hostname = next(i for i, r in enumerate(records) if r.endswith(b"/etc/hostname\0"))
    ts = struct.unpack_from("<Q", records[hostname])[0]
    flood = [struct.pack("<Q", ts + i) + records[hostname][8:] for i in range(200_000)]
    records[hostname + 1:hostname + 1] = flood
    run = normalize(Spool(header=spool.header, records=records, phases=spool.phases, trailer=spool.trailer,
                          sdk=spool.sdk, dac=spool.dac))
    assert run.kernel.count > 200_000
    archive = tmp_path / "big.tar.gz"
    publish(run, archive)
    for args in (("validate", archive), ("diff", archive, archive), ("show", "--no-spool", archive)):
        result = measure_cli(*args, cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
