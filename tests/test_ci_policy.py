"""On CI a skip is a failure (tests/conftest.py): a prerequisite CI lacks must not pass silently."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT


@pytest.mark.parametrize(("ci", "returncode", "says"), [
    ("true", 1, "skipped on CI, where make setup installs every prerequisite: Skipped: needs a gadget"),
    ("", 0, "1 skipped"),
])  # fmt: skip
def test_a_skip_fails_on_ci_and_skips_elsewhere(tmp_path: Path, ci: str, returncode: int, says: str) -> None:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    demo = "import pytest\n\ndef test_x():\n    pytest.skip('needs a gadget')\n"
    (tmp_path / "test_demo.py").write_text(demo)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": ci}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-c", os.devnull, "--rootdir", tmp_path, tmp_path],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == returncode, done.stdout + done.stderr
    assert says in done.stdout
