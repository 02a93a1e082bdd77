"""Smoke test of the benchmark workloads: they build, and they make exactly the
operations they claim, counted by an independent witness (strace) or by what
they leave on disk. No timing is asserted anywhere: the benchmark numbers
come from `python -m bench.run`, never from tests.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.build import Tools, build
from bench.report import Expectation, check_events, parse_report
from bench.suite import by_name

pytestmark = pytest.mark.bench

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Tools:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    return build(tmp_path_factory.mktemp("bench-bin"))


def traced(argv: list[str], syscalls: str, log: Path) -> tuple[str, list[str]]:
    """Runs `argv` under `strace -f`; returns its stdout and strace's lines."""
    done = subprocess.run(
        ["strace", "-f", "-qq", "-e", f"trace={syscalls}", "-o", str(log), "--", *argv],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return done.stdout, log.read_text().splitlines()


@needs_strace
def test_open_heavy_makes_exactly_n_marked_opens(tools: Tools, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = by_name("open_heavy").argv(tools, scratch, (600,))
    stdout, lines = traced(argv, "openat", tmp_path / "strace.log")
    report = parse_report(stdout)
    marked = [ln for ln in lines if "abench-" in ln]
    assert len(marked) == 600 == report.ops["openat"]
    assert report.ops["existing"] + report.ops["missing"] + report.ops["created"] == 600
    assert sum("ENOENT" in ln for ln in marked) == report.ops["missing"]
    # "created" counts the 100 files set up first and then every create/truncate;
    # below 1000 iterations each create uses a new name, so all of them are on disk
    names = [p.name for p in scratch.iterdir()]
    assert sum(n.startswith("abench-e-") for n in names) == 100
    assert sum(n.startswith("abench-c-") for n in names) == report.ops["created"] - 100
    assert report.expect == (Expectation("openat", "abench-", 600),)


@needs_strace
def test_open_heavy_repeats_its_missing_names_when_asked(tools: Tools, tmp_path: Path) -> None:
    """bench.scaling's `repeated` paths: the same N opens, but only MISSING distinct missing names."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    counts = {}
    for missing in (0, 9):
        argv = [tools.program("open_heavy"), str(scratch), "600", "0", str(missing)]
        stdout, lines = traced(argv, "openat", tmp_path / f"strace-{missing}.log")
        report = parse_report(stdout)
        failed = [ln.split('"')[1] for ln in lines if "abench-" in ln and "ENOENT" in ln]
        assert len(failed) == report.ops["missing"] and report.ops["openat"] == 600
        assert report.ops["missing_names"] == missing
        counts[missing] = len(set(failed))
    assert counts == {0: report.ops["missing"], 9: 9}

@needs_strace
def test_exec_heavy_execs_n_times(tools: Tools, tmp_path: Path) -> None:
    argv = by_name("exec_heavy").argv(tools, tmp_path, (7,))
    stdout, lines = traced(argv, "execve", tmp_path / "strace.log")
    assert sum('execve("/bin/true"' in ln for ln in lines) == 7
    assert parse_report(stdout).ops == {"execve": 7, "fork": 7}


@needs_strace
def test_network_connects_and_sends_to_its_own_ports(tools: Tools, tmp_path: Path) -> None:
    argv = by_name("network").argv(tools, tmp_path, (25, 75))
    stdout, lines = traced(argv, "connect,sendto", tmp_path / "strace.log")
    ops = parse_report(stdout).ops
    assert sum(f"htons({ops['tcp_port']})" in ln for ln in lines if "connect(" in ln) == 25
    assert sum(f"htons({ops['udp_port']})" in ln for ln in lines if "sendto(" in ln) == 75


def test_dev_job_commits_twice_and_runs_every_step(tools: Tools, tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    argv = by_name("dev_job").argv(tools, tmp_path, (40,))
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert parse_report(done.stdout).ops == {"files": 40, "commands": 11}
    count = subprocess.run(["git", "-C", str(tmp_path / "repo"), "rev-list", "--count", "HEAD"],
                           capture_output=True, text=True, check=True)
    assert count.stdout.strip() == "2"
    tracked = subprocess.run(["git", "-C", str(tmp_path / "repo"), "ls-files"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert len(tracked) == 40 + 3  # the sources plus three test files


def test_report_line_and_event_check() -> None:
    stdout = "noise\nABENCH " + (
        '{"workload":"w","elapsed_s":0.5,"ops":{"openat":2},'
        '"expect":[{"kind":"openat","contains":"abench-","count":2}],"realtime_ns":7}\n'
    )
    report = parse_report(stdout)
    assert (report.elapsed_s, report.extra) == (0.5, {"realtime_ns": 7})
    records = [("openat", "/s/abench-e-000"), ("openat", "/etc/ld.so.cache"),
               ("connect", "abench-"), ("openat", "/s/abench-m-4")]
    [check] = check_events(report.expect, records)
    assert (check.seen, check.ok) == (2, True)


def test_start_stamp_prints_a_realtime_stamp(tools: Tools) -> None:
    done = subprocess.run([tools.program("start_stamp")], capture_output=True, text=True,
                          check=True)
    assert parse_report(done.stdout).extra["realtime_ns"] > 0


def test_whole_wall_ratio_is_each_modes_median_wall_over_bares() -> None:
    """bench.run's whole-wall column: median wall of the runs that worked, over bare's median wall."""
    from bench.overhead import summarize
    from bench.variants import Measurement

    def m(variant: str, own: float, wall: float, error: str | None = None) -> Measurement:
        return Measurement(variant=variant, own_s=own, wall_s=wall, error=error)

    runs = {"bare": [m("bare", 1.0, 1.0), m("bare", 2.0, 2.0), m("bare", 3.0, 3.0)],
            "runner": [m("runner", 1.1, 4.0), m("runner", 1.2, 5.0), m("runner", 1.3, 6.0),
                       m("runner", 0.0, 100.0, error="runner exited 1")]}
    result = summarize(by_name("open_heavy"), runs, {})
    assert result.wall_ratios == {"runner": 2.5}  # median 5.0 (the failed run left out) over median 2.0


def test_scaling_keeps_the_runners_after_exit_log() -> None:
    from bench.scaling_fit import after_exit_log

    stderr = ('{"event": "run.start", "level": "info"}\nnot json\n'
              '{"component": "session", "normalized_by": "live", "total_s": 0.9, "live_behind_records": 12, '
              '"event": "run.after_exit", "level": "info", "timestamp": "t"}\n')
    assert after_exit_log(stderr) == {"normalized_by": "live", "total_s": 0.9, "live_behind_records": 12}
    assert after_exit_log("no log here") == {}


def test_paired_ratios_pair_each_round_with_its_own_bare_run() -> None:
    """A slow round slows bare and runner alike: the per-round ratio stays, the ratio of medians moves."""
    from bench.overhead import summarize
    from bench.variants import Measurement

    def m(variant: str, own: float, error: str | None = None) -> Measurement:
        return Measurement(variant=variant, own_s=own, wall_s=own, error=error)

    runs = {"bare": [m("bare", 1.0), m("bare", 2.0), m("bare", 1.0), m("bare", 9.0, error="bare exited 1")],
            "runner": [m("runner", 1.1), m("runner", 2.4), m("runner", 1.3), m("runner", 9.9)]}
    result = summarize(by_name("open_heavy"), runs, {})
    assert result.paired == {"runner": (pytest.approx(1.2), pytest.approx(1.1), pytest.approx(1.3))}
    assert result.ratios["runner"] == pytest.approx(1.85)  # median of 4 runs (1.3, 2.4) over 1.0 of 3


def test_under_load_variants_name_a_runner_and_its_environment() -> None:
    from bench.under_load import parse_variant
    assert parse_variant("main-thread=/m/assay-runner,ASSAY_RUNNER_LIVE_NORMALIZE=1,X=a=b") == (
        "main-thread", "/m/assay-runner", {"ASSAY_RUNNER_LIVE_NORMALIZE": "1", "X": "a=b"})
    assert parse_variant("main=/m/assay-runner") == ("main", "/m/assay-runner", {})
    for bad in ("main", "=/m/assay-runner", "main=/m/assay-runner,NOVALUE"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_variant(bad)
