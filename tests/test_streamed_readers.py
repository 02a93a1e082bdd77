"""Content declared honestly and within the caps costs every reader bounded memory.

Before the readers streamed, a 60 KB-class archive whose surface held 15
million short values took validate, show, report and diff 1.15-1.27 GB of
peak RSS, and 2 million kernel lines took 1.0 GB; 6.7 million kernel lines
(the member cap's gibibyte) took validate 3.35 GB. Each case runs the real
CLI in a child and reads that child's peak RSS from wait4(2) (tests/bombs.py).
Timings are not asserted here: bench/readers.py reports them.

The archives come from bench/hostile_archives.py (the minimal golden with
one member replaced, declared with its true size and digest). The kernel
floods for show and report open one file over and over: the review lists
every exec of a process, so a flood of execs is output-sized there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.hostile_archives import kernel_flood, surface_bomb
from tests.bombs import GOLDEN, measure_cli

RSS_LIMIT_MIB = 200


def small(tmp_path: Path, *args: str | Path, codes: tuple[int, ...] = (0,)) -> str:
    """Run the CLI; assert its exit code and peak RSS; its stdout."""
    run = measure_cli(*args, cwd=tmp_path)
    assert run.returncode in codes, (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    assert run.max_rss_mib < RSS_LIMIT_MIB, f"{args[0]}: peak RSS {run.max_rss_mib:.0f} MiB"
    return run.stdout + run.stderr


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = surface_bomb(tmp_path_factory.mktemp("surface") / "surface.tar.gz", 15_000_000)
    assert path.stat().st_size < 400_000
    return path


def test_a_surface_of_15_million_values_costs_validate_little(tmp_path: Path, bomb: Path) -> None:
    """The values are all "a": invalid (a set repeats a value, and the kernel lines' paths are
    missing), reported as problems, in bounded memory."""
    out = small(tmp_path, "validate", bomb, codes=(1,))
    assert "capability-surface.json: filesystem_paths has duplicate 'a'" in out
    assert "filesystem_paths has 'a', which no layers/kernel.ndjson line carries" in out


def test_a_surface_of_15_million_values_costs_show_report_and_diff_little(tmp_path: Path, bomb: Path) -> None:
    small(tmp_path, "show", "--no-spool", bomb)
    small(tmp_path, "report", "--no-spool", bomb, "-o", tmp_path / "r.html")
    assert (tmp_path / "r.html").stat().st_size > 0
    out = small(tmp_path, "diff", GOLDEN, bomb, codes=(2,))
    assert "not a valid v0 archive" in out and "has duplicate 'a'" in out


@pytest.fixture(scope="module")
def flood(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kernel_flood(tmp_path_factory.mktemp("flood") / "flood.tar.gz", 2_000_000, execs=False)


def test_two_million_kernel_lines_cost_every_reader_little(tmp_path: Path, flood: Path) -> None:
    assert small(tmp_path, "validate", flood).startswith(f"OK {flood}: 8 members")
    assert "summary: 0 added, 0 removed" in small(tmp_path, "diff", GOLDEN, flood)
    view = json.loads(small(tmp_path, "show", "--json", "--no-spool", flood))
    assert view["summary"]["kernel_events"] == 2_000_000
    assert view["summary"]["kinds"]["openat"] == 2_000_000 - 2
    small(tmp_path, "report", "--no-spool", flood, "-o", tmp_path / "r.html")


def test_a_kernel_layer_at_the_member_cap_validates_in_bounded_memory(tmp_path: Path) -> None:
    """6.7 million lines, opens and execs in turn: the member cap's gibibyte, a valid archive."""
    archive = kernel_flood(tmp_path / "cap.tar.gz", 6_700_000)
    out = small(tmp_path, "validate", "--json", archive)
    report = json.loads(out)
    assert report["valid"] is True and report["members"] == 8, out[-2000:]
