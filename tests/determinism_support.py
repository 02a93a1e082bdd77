"""`assay-runner determinism` run as a user runs it, for the gate's tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support import assay


def determinism(out: Path, run_id: str, work: Path, *cmd: str,
                extra: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run the gate like a user; returns the process and the parsed JSON report."""
    proc = assay("determinism", "--runs", "3", "--run-id", run_id, "--out", out,
                 "--workdir", work, *extra, "--", *cmd)
    assert proc.returncode != 125, proc.stderr
    report_path = out / "determinism-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return proc, report
