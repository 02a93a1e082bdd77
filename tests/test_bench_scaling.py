"""The pure parts of `bench.scaling`: taskstats records parsed from real kernel datagrams, whose peak
is whose, the after-exit log, the least-squares line, the spreads and the tables. No root, and no
timing is asserted: the figures come from `python -m bench.scaling`, never from tests.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from bench.scaling import RunSample, SizeResult, path_variants, sizes
from bench.scaling_fit import after_exit_log, daemon_worker, fit_line, per_100k, roles, spread
from bench.scaling_tables import linearity_table, runs_table, speed_table
from bench.taskstats import (
    TS_HIWATER_AT,
    TS_TGID_AT,
    ProcessPeak,
    TaskstatsError,
    ThreadExit,
    descendants,
    exits_in,
    parse_stats,
    process_peaks,
)

pytestmark = pytest.mark.bench

RECORDED = json.loads((Path(__file__).parent / "data" / "taskstats_exits.json").read_text())


def recorded_exits() -> list[ThreadExit]:
    return [e for d in RECORDED["datagrams"] for e in exits_in(bytes.fromhex(d), RECORDED["family"])]


def test_the_kernels_exit_records_give_each_thread_and_the_processs_own_peak() -> None:
    exits = recorded_exits()
    pid = RECORDED["pid"]
    assert len(exits) == 2  # the second thread, then the main one
    assert {e.tgid for e in exits} == {pid}
    assert pid in {e.pid for e in exits}
    assert all(e.ppid == RECORDED["parent"] and e.comm.startswith("python") for e in exits)
    peak = process_peaks(exits)[pid]
    # the map's high-water mark at exit: at least what the process read from /proc just before
    assert peak.peak_rss_kib >= RECORDED["vmhwm_kib_before_exit"] >= 60 * 1024
    assert peak.peak_rss_kib == max(e.hiwater_rss_kib for e in exits)
    assert peak.cpu_s == pytest.approx(sum(e.cpu_s for e in exits))


def test_records_of_another_family_or_too_old_a_version_are_not_read_as_exits() -> None:
    datagram = bytes.fromhex(RECORDED["datagrams"][0])
    assert exits_in(datagram, RECORDED["family"] + 1) == []
    stats = bytearray(TS_TGID_AT + 8)
    struct.pack_into("=H", stats, 0, 11)
    with pytest.raises(TaskstatsError, match="ac_tgid"):
        parse_stats(bytes(stats))
    struct.pack_into("=H", stats, 0, 12)
    struct.pack_into("=Q", stats, TS_HIWATER_AT, 4096)
    assert parse_stats(bytes(stats)).hiwater_rss_kib == 4096


def peak(tgid: int, ppid: int, comm: str, kib: int) -> ProcessPeak:
    return ProcessPeak(tgid, ppid, comm, kib, 0.0)


# one `assay-runner run` of open_heavy under GNU time (pid 4402), as bench.scaling recorded it
RUN = {p.tgid: p for p in [
    peak(4402, 4342, "time", 1380), peak(4403, 4402, "assay-runner-py", 40144),
    peak(4407, 4403, "assay-runner-py", 31580), peak(4408, 4407, "assay-runner-py", 31024),
    peak(4409, 4403, "python3", 28276), peak(4410, 4408, "start_stamp", 1404),
    peak(4411, 4410, "open_heavy", 1464), peak(4413, 4403, "assay-runner-py", 30924),
    peak(9999, 1, "unrelated", 900_000)]}


def test_roles_name_the_runner_and_its_live_process_not_its_forks_or_the_host() -> None:
    under = descendants(RUN, 4402)
    assert 9999 not in under and 4402 not in under
    assert set(under) == set(RUN) - {9999, 4402}
    who = roles({4402: RUN[4402], **under}, 4402)
    assert who.runner is not None and who.runner.tgid == 4403
    assert who.live is not None and who.live.tgid == 4409


def test_without_a_live_process_or_a_runner_the_roles_are_none() -> None:
    threaded = {t: p for t, p in RUN.items() if t != 4409}
    assert roles(threaded, 4402).live is None
    assert roles({}, 4402) == roles({4411: RUN[4411]}, 4402)
    assert roles({}, 4402).runner is None


def test_the_daemons_run_worker_is_its_exited_child_other_than_the_sensor() -> None:
    # a daemon run as bench.scaling recorded it: daemon 6355, sensor 6360 (alive, so no record
    # unless it died), the worker 6428 and the command it spawned
    run = {p.tgid: p for p in [peak(6428, 6355, "assay-runner-py", 41108),
                                peak(6435, 6428, "assay-runner-py", 25176),
                                peak(6436, 6435, "start_stamp", 1380)]}
    worker = daemon_worker(run, 6355, 6360)
    assert worker is not None and worker.tgid == 6428
    assert daemon_worker({**run, 6360: peak(6360, 6355, "assay-runner-py", 900_000)}, 6355, 6360) == worker
    assert daemon_worker({6436: run[6436]}, 6355, 6360) is None


def test_the_after_exit_log_keeps_the_live_processs_figures_and_base_lines_parse_too() -> None:
    line = ('{"normalized_by": "live", "total_s": 0.112, "live_behind_records": 7146, "live_cpu_s": 0.125, '
            '"live_peak_rss_mib": 27.6, "drained_s": 0.0, "spooled_s": 0.001, "cleaned_up_s": 0.004, '
            '"normalized_s": 0.069, "published_s": 0.037, "event": "run.after_exit", "level": "info", '
            '"timestamp": "2026-11-26T17:00:53Z"}')
    got = after_exit_log("other\n" + line + "\n")
    assert got["live_peak_rss_mib"] == 27.6 and got["normalized_by"] == "live"
    assert "event" not in got and "timestamp" not in got
    assert after_exit_log('{"event": "run.after_exit", broken\n') == {}


def test_a_straight_line_has_no_residual_and_its_slope_is_per_100k_events() -> None:
    fit = fit_line([(50_000, 0.2), (200_000, 0.5), (800_000, 1.7)])
    assert fit is not None
    assert fit.slope_s_per_100k == pytest.approx(0.2)
    assert fit.intercept_s == pytest.approx(0.1)
    assert fit.max_residual_s == pytest.approx(0.0, abs=1e-12)
    assert fit.r2 == pytest.approx(1.0)


def test_a_bent_curve_shows_in_the_residual_and_r2() -> None:
    points = [(50_000, 0.1), (200_000, 0.4), (800_000, 6.4)]  # quadratic in events
    fit = fit_line(points)
    assert fit is not None
    line = [fit.intercept_s + fit.slope_s_per_100k * x / 100_000 for x, _ in points]
    residuals = [abs(y - v) for (_, y), v in zip(points, line, strict=True)]
    assert fit.max_residual_s == pytest.approx(max(residuals))
    assert fit.max_residual_s > 0.5 and fit.r2 is not None and fit.r2 < 0.99


def test_one_size_has_no_line_and_flat_seconds_no_r2() -> None:
    assert fit_line([(50_000, 0.2), (50_000, 0.3)]) is None
    flat = fit_line([(1, 2.0), (2, 2.0)])
    assert flat is not None and flat.r2 is None and flat.slope_s_per_100k == 0


def test_spread_and_per_100k_leave_out_what_is_missing() -> None:
    assert spread([46.0, None, 105.0, 55.0]) == 59.0
    assert spread([46.0, None]) is None
    assert per_100k(0.3, 200_000) == pytest.approx(0.15)
    assert per_100k(None, 200_000) is None


def sample(size: int, runner: str, ready: float, own: float | None, live: float | None,
           **kw: object) -> RunSample:
    s = RunSample(size, "distinct", runner, ready_after_exit_s=ready, runner_rss_mib=own, live_rss_mib=live,
                  largest_rss_mib=max(v for v in (own, live, 1.0) if v is not None), drops=0, events_ok=True,
                  after_exit={"normalized_by": "live"} if live is not None else {})
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_tables_show_na_for_figures_a_runner_lacks_and_leave_failed_runs_out() -> None:
    results = [
        SizeResult(n, "distinct",
                   [sample(n, "this", n / 1e6, 40.0, 30.0 + n / 1e5), sample(n, "base", n / 5e5, None, None),
                    sample(n, "this", 99.0, 99.0, 99.0, error="assay-runner exited 1")],
                   {"this": [{"events": n, "normalize_wall_s": n / 4e5, "events_per_cpu_s": 3.9e5,
                              "normalize_cpu_s": n / 3.9e5, "stage_b_cpu_s": 0.1,
                              "peak_rss_kib": 50 * 1024}]})
        for n in (50_000, 200_000, 800_000)]
    runs = runs_table(results, ["this", "base"])
    assert "| 1/2 " in runs  # the failed run is counted, not averaged in
    base_rows = [line for line in runs.splitlines() if "| base " in line]
    assert len(base_rows) == 3 and all(line.count("n/a") == 3 for line in base_rows)  # no log either
    assert all(line.rstrip(" |").endswith("live") for line in runs.splitlines() if "| this " in line)
    assert "99" not in runs
    speed = speed_table(results, ["this"])
    assert "400,000" in speed and "390,000" in speed
    lin = linearity_table(results, ["this", "base"], ["this"])
    this_row = next(line for line in lin.splitlines() if line.startswith("| this: ready"))
    assert "0.100" in this_row  # 1 s per 1M events: 0.1 s per 100k
    assert "0 (40-40)" in this_row and "8 (30-38)" in this_row
    base_row = next(line for line in lin.splitlines() if line.startswith("| base: ready"))
    assert "0.200" in base_row and base_row.count("n/a") == 2


def test_sizes_and_paths_options_refuse_what_they_cannot_run() -> None:
    assert sizes("50000,200_000") == [50_000, 200_000]
    assert path_variants("repeated") == ["repeated"]
    for bad in ("", "0", "5k", "-3"):
        with pytest.raises(Exception, match="--sizes"):
            sizes(bad)
    with pytest.raises(Exception, match="--paths"):
        path_variants("distinct,shared")
