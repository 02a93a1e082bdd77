"""On CI a skip is a failure (tests/conftest.py): a prerequisite CI lacks must not pass silently."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.host.ci import on_ci
from tests.support import ROOT

SKIPS = {
    "in the test": "def test_x():\n    pytest.skip('needs a gadget')\n",
    "by a mark": "@pytest.mark.skipif(True, reason='needs a gadget')\ndef test_x():\n    pass\n",
    "in a fixture": ("@pytest.fixture\ndef gadget():\n    pytest.skip('needs a gadget')\n\n"
                     "def test_x(gadget):\n    pass\n"),
    "importorskip in the test": "def test_x():\n    pytest.importorskip('no_such_gadget')\n",
    "importorskip in the module": "pytest.importorskip('no_such_gadget')\n\ndef test_x():\n    pass\n",
}


def _session(tmp_path: Path, body: str, ci: str) -> subprocess.CompletedProcess[str]:
    """pytest with the suite's conftest on one demo test file, `CI` set to `ci`."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_demo.py").write_text("import pytest\n\n" + body)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": ci}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-c", os.devnull, "--rootdir", tmp_path, tmp_path],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip


@pytest.mark.parametrize("where", sorted(SKIPS))
def test_a_skip_fails_on_ci(tmp_path: Path, where: str) -> None:
    done = _session(tmp_path, SKIPS[where], "true")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "skipped on CI, where make setup installs every prerequisite:" in done.stdout
    assert "gadget" in done.stdout and "skipped" not in done.stdout.splitlines()[-1]


@pytest.mark.parametrize("where", sorted(SKIPS))
def test_a_skip_stays_a_skip_elsewhere(tmp_path: Path, where: str) -> None:
    done = _session(tmp_path, SKIPS[where], "")
    assert done.returncode == 5 if "module" in where else done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "failed" not in done.stdout


@pytest.mark.parametrize(("value", "ci"), [
    ("true", True), ("TRUE", True), (" 1 ", True), ("yes", True),
    ("", False), ("false", False), ("0", False), ("no", False),
])  # fmt: skip
def test_ci_is_one_test_of_the_variable(value: str, ci: bool) -> None:
    """The runner's session label and the suite's skip policy read `CI` through the same function."""
    assert on_ci({"CI": value}) is ci
    assert on_ci({}) is False


CI_READ = re.compile(r"""(environ\.get|getenv)\(\s*["']CI["']"""  # os.environ.get("CI"), os.getenv("CI")
                     r"""|environ\[\s*["']CI["']\s*\]"""  # os.environ["CI"]
                     r"""|["']CI["']\s+in\s+\S*environ""")  # "CI" in os.environ


def ci_reads(root: Path) -> list[str]:
    """Every place under `root` that reads `CI` itself instead of calling `runner.host.ci.on_ci`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if ".venv" in path.parts or path in (root / "runner" / "host" / "ci.py", Path(__file__)):
            continue  # the one reading, and this check's own examples
        found += [f"{path.relative_to(root)}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                  if CI_READ.search(line)]
    return found


def test_nothing_else_reads_ci(tmp_path: Path) -> None:
    assert ci_reads(ROOT) == []
    elsewhere = "import os\nci = bool(os.environ.get('CI'))\nci = 'CI' in os.environ\n"
    (tmp_path / "elsewhere.py").write_text(elsewhere)
    assert ci_reads(tmp_path) == ["elsewhere.py:2", "elsewhere.py:3"]  # the check sees other readings
