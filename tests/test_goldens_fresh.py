"""The run-based goldens are what the runner writes today.

`golden/archive-*/` are frozen outputs of real runs; when a change alters
what a run records (a new health note, a newly decoded event), the goldens
must be regenerated with it, or every test that reads them checks a shape
the runner no longer writes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.kernel
@pytest.mark.xdist_group("fixed_golden_workspace")
def test_run_based_goldens_match_a_fresh_run() -> None:
    """Fixed run ids and workspaces under /tmp/assay-runner: one at a time (xdist group)."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_goldens.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        "golden/archive-* differ from a fresh run; regenerate with "
        f"`sudo .venv/bin/python scripts/gen_goldens.py` and review the diff:\n{proc.stderr[-4000:]}")
