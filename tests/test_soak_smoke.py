"""A small soak (bench/soak.py), so the harness cannot rot: it runs, kills, counts and reports.

No timing and no figure is asserted: the soak's numbers come from
`python -m bench.soak` (docs/benchmarks.md). What is asserted is what must
hold at any size: unkilled runs succeed with valid archives, no archive is
half-written (archives rebuilt from killed runs included), and nothing of
the batch (cgroup, process, fd, attached program) is left once the next
start has swept what the killed runners left and the background detaches
are done; the daemon ends with the fds and programs it started with.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, runner_env

pytestmark = [pytest.mark.kernel, pytest.mark.bench]


def test_small_soak_in_both_modes_leaves_nothing_behind(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--runs", "3", "--concurrency", "2", "--kills", "1",
         "--seed", "7", "--json", str(report_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=runner_env(), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert [m["mode"] for m in report["modes"]] == ["direct", "daemon"]
    for mode in report["modes"]:
        outcomes = mode["outcomes"]
        assert len(outcomes) == 3 and mode["failures"] == [], mode["failures"]
        planned = [o for o in outcomes if o["kill_at_s"] is not None]
        assert len(planned) == 1  # seeded: the same run every time
        unkilled = [o for o in outcomes if o["killed"] is None]
        assert all(o["returncode"] == 0 and o["archive"] for o in unkilled)
        assert mode["recovery_run"]["returncode"] == 0 and mode["recovery_run"]["archive"]
        leaks = mode["leaks"]
        assert (leaks["processes"], leaks["attached_programs"], leaks["file_descriptors"]) == (0, 0, 0), leaks
        # Direct: the next `run` sweeps what a killed runner left; daemon: the daemon sweeps when
        # it reaps a worker that a signal killed.
        assert leaks["cgroups"] == 0, leaks
        assert mode["recovered_archives"]["invalid"] == []  # an archive rebuilt from a killed run validates
        if mode["mode"] == "daemon":
            for key in ("daemon_fds", "daemon_programs"):
                assert mode["after"][key] == mode["before"][key], (key, mode["before"], mode["after"])
