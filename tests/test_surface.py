"""The capability surface in bounded memory (normalizer/surface.py): values spilled as sorted runs and
merged as the member is streamed give exactly msgspec's bytes, and memory does not grow with the
number of distinct values."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from normalizer import build, collector, scan, surface
from normalizer.artifacts import SURFACE_SCHEMA, CapabilitySurface, json_member
from normalizer.build import normalize
from normalizer.redact import find_unredacted_bytes
from normalizer.surface import DistinctValues, Preview, surface_member, write_surface
from runner.evidence.archive import archive_bytes, write_archive
from spool.format import Spool, read_spool
from tests.example_spool import EXAMPLE, RECORDS, missing_opens

DATA = Path(__file__).resolve().parent / "data"
SETS = ("files", "endpoints", "execs", "written", "blocked")
PIECES = ["AKIA", "ABCDEFGHIJKLMNOP", "ghp_", "sk-", "token=", "secretvalue123", "Bearer ", "/tmp/x", "\"",
          "\\", "\n", "\x00", "\x7f", "\u2028", "caf\u00e9", "\U0001f600", "\\xff", ",", "]", " "]
VALUE = st.lists(st.sampled_from(PIECES), max_size=5).map("".join) | st.text(max_size=12)


@contextlib.contextmanager
def tiny() -> Iterator[None]:
    """Every limit small, so that values spill, runs merge in levels and frames and batches split."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (("HELD_VALUES", 3), ("FRAME_VALUES", 2), ("FAN_IN", 2), ("ENCODE_VALUES", 2),
                            ("PREVIEW_VALUES", 2)):
            mp.setattr(surface, name, value)
        yield


def _collected(batches: list[tuple[str, list[str]]]) -> DistinctValues:
    """`batches` added as the collector adds them: into the sets, bounded after each."""
    values = DistinctValues(SETS)
    for name, batch in batches:
        values.sets[name].update(batch)
        values.bound()
    return values


@given(st.lists(st.tuples(st.sampled_from(SETS), st.lists(VALUE, max_size=6)), max_size=25),
       st.lists(st.text(min_size=1, max_size=6), max_size=3))
def test_the_streamed_member_is_msgspecs_encoding(batches: list[tuple[str, list[str]]],
                                                   tools: list[str]) -> None:
    expected = {name: sorted({v for n, batch in batches if n == name for v in batch}) for name in SETS}
    decisions = sorted({f"allow:{t}" for t in tools})
    with tiny():
        values = _collected(batches)
        member, preview = write_surface(values, "run-1", sorted(set(tools)), decisions)
        values.close()
    whole = json_member(CapabilitySurface(
        schema=SURFACE_SCHEMA, run_id="run-1", filesystem_paths=expected["files"],
        network_endpoints=expected["endpoints"], process_execs=expected["execs"],
        mcp_tools=sorted(set(tools)), policy_decisions=decisions))
    assert member.read_bytes() == whole
    assert (member.sha256, member.size) == (hashlib.sha256(whole).hexdigest(), len(whole))
    assert member.unredacted == find_unredacted_bytes(whole)  # the whole member's first rule, in table order
    assert preview == surface.SurfacePreview(**{name: Preview(count=len(v), first=v[:2])
                                                for name, v in expected.items()})


def test_spilled_runs_are_merged_in_levels() -> None:
    """Runs of one set pile up to FAN_IN and are merged into one of the next level, so a final merge
    reads a few runs per level, not one per spill."""
    with tiny():
        values = _collected([("files", [f"/w/{i % 50:03d}", f"/w/{i:03d}-x"]) for i in range(200)])
        runs = values._runs["files"]
        assert len(runs) < 12 and max(level for level, _, _ in runs) >= 3
        got = list(values.sorted_values("files"))
    values.close()
    assert got == sorted({f"/w/{i % 50:03d}" for i in range(200)} | {f"/w/{i:03d}-x" for i in range(200)})


@pytest.mark.parametrize("values", [["b", "a"], ["a", "a"]])
def test_values_out_of_order_or_repeated_are_refused(values: list[str]) -> None:
    """The surface's own rule (each list a sorted set) is checked as it is streamed."""
    with pytest.raises(RuntimeError, match="not sorted and distinct"):
        surface._Sink().values(iter(values))


def test_a_streamed_surface_gives_the_archive_bytes_of_the_encoded_one() -> None:
    run = normalize(read_spool(DATA / "example.spool"))
    members = run.members()
    assert archive_bytes(run.run_id, members) == archive_bytes(
        run.run_id, {**members, "capability-surface.json": run.surface.read_bytes()})
    by_hand = surface_member(run.surface.decoded())
    assert (by_hand.read_bytes(), by_hand.sha256) == (run.surface.read_bytes(), run.surface.sha256)


def test_the_file_handed_over_holds_every_byte() -> None:
    """The live normalizer sends the member's descriptor and exits: a member too large to stay in
    memory must have all its bytes in the file, none left in a buffer of this process."""
    values = DistinctValues(SETS)
    values.sets["files"].update(f"/w/{i:07d}" for i in range(2 * surface.FILE_IN_MEMORY // 10))
    member, _ = write_surface(values, "run-1", [], [])
    values.close()
    with os.fdopen(os.dup(member.fileno()), "rb") as handed:
        handed.seek(0)
        assert handed.read() == member.read_bytes()
    assert member.size > surface.FILE_IN_MEMORY


def _peak(n: int, out: Path) -> tuple[int, int]:
    """tracemalloc's peak over normalizing a spool with `n` distinct missing files and writing its
    archive, and how much of the kernel layer's deflated copy (kept in memory up to 8 MiB by
    design, normalizer/layer_digest.py) was held."""
    spool = Spool(header=EXAMPLE.header, records=RECORDS + missing_opens(n), phases=EXAMPLE.phases,
                  trailer=EXAMPLE.trailer)
    tracemalloc.start()
    try:
        run = normalize(spool)
        write_archive(out, run.run_id, run.members())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert run.preview.files.count >= n
    return peak, len(run.kernel.deflated().data.read())


def test_memory_does_not_grow_with_distinct_values(tmp_path: Path) -> None:
    """Normalize and publish with 20k and 80k distinct paths, every other bound (the scan's memo, the
    held evidence, the tail memo, the held values) made small so that all of them are full at 20k:
    the peak grows by less than 1 MiB beyond the kernel layer's deflated copy. Holding the
    surface's values (as main did until this test) grows it by about 30 MiB here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan, "OPEN_MEMO", 64)
        mp.setattr(build, "SPILL_EVERY", 1024)
        mp.setattr(collector, "MEMO_ENTRIES", 256)
        mp.setattr(surface, "HELD_VALUES", 1024)
        small, small_layer = _peak(20_000, tmp_path / "small.tar.gz")
        large, large_layer = _peak(80_000, tmp_path / "large.tar.gz")
    assert large - small < (1 << 20) + (large_layer - small_layer), (small, large, small_layer, large_layer)
