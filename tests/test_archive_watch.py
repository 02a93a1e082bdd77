"""An archive that does not conform fails the test that wrote it (tests/archive_watch.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

DEMO = '''
import io
import tarfile

import pytest


def bad_archive(directory):
    """What the runner leaves (ID.tar.gz next to ID.spool), with an archive Assay would refuse."""
    directory.mkdir(exist_ok=True)
    with tarfile.open(directory / "x.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    (directory / "x.spool").write_bytes(b"")


@pytest.fixture(scope="module")
def hidden(tmp_path_factory):
    return {"dir": tmp_path_factory.mktemp("hidden")}  # a directory the watch cannot see as a value


def test_good(tmp_path):
    (tmp_path / "out").mkdir()


def test_bad(tmp_path):
    bad_archive(tmp_path / "out")


def test_makes_hidden(hidden):
    pass


def test_writes_hidden(hidden):
    bad_archive(hidden["dir"])


def test_last():
    pass
'''


def test_a_bad_archive_fails_the_test_that_wrote_it_or_is_named_by_it(tmp_path: Path) -> None:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_demo.py").write_text(DEMO)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": ""}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-p", "no:xdist", "-c", os.devnull, "--rootdir", tmp_path,
                               "--basetemp", tmp_path / "base", tmp_path / "test_demo.py"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip
    finally:
        shutil.rmtree(tmp_path / "base")  # the demo's bad archives are under this session's base too
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "5 passed, 2 errors" in out.splitlines()[-1], out
    assert "ERROR at teardown of test_bad" in out and "archives written by this test do not conform" in out
    assert "ERROR at teardown of test_last" in out  # the session's check, after the last test ...
    assert "written by test_demo.py::test_writes_hidden: " in out  # ... names the test that wrote it
    assert "written by test_demo.py::test_bad" not in out  # checked once, by its own test
