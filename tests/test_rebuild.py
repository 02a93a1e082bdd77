"""What the next start says about a dead run's spool, in each state a SIGKILL can leave it (no root).

`rebuild` (runner/capture/rebuild.py) is what `run`, the daemon and `doctor
--fix` call for a dead run whose cgroup they removed; the kernel test
(test_faults_kernel.py) kills a real runner, these give it each spool state
directly: none yet, a file without a whole header, a partial spool.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.capture.rebuild import rebuild
from runner.evidence.archive import read_archive
from runner.evidence.validate import validate_members
from spool.format import Phase, encode_frame, read_spool
from tests.partial_spools import DATA, HEADER, partial_of


@pytest.fixture
def out_fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.mark.parametrize("content", [b"", encode_frame(HEADER)[:-1]], ids=["empty", "torn-header"])
def test_a_run_that_died_before_its_spool_had_a_header_has_nothing_to_rebuild(
        tmp_path: Path, out_fd: int, content: bytes) -> None:
    partial = tmp_path / "r.spool.partial"
    partial.write_bytes(content)
    said = rebuild(out_fd, tmp_path, "r.spool")
    assert said == (f"nothing to rebuild into {tmp_path / 'r.tar.gz'}: the run died before its spool had "
                    f"a header ({partial} is left as it is)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.spool.partial"]
    assert partial.read_bytes() == content


def test_a_run_that_died_before_creating_its_spool_has_nothing_to_rebuild(
        tmp_path: Path, out_fd: int) -> None:
    said = rebuild(out_fd, tmp_path, "r.spool")
    assert said.startswith(f"nothing to rebuild into {tmp_path / 'r.tar.gz'}: no spool of the dead run")
    assert list(tmp_path.iterdir()) == []


def test_a_partial_spool_is_rebuilt_into_a_valid_archive_marked_partial(tmp_path: Path, out_fd: int) -> None:
    records = partial_of(DATA / "example.spool", tmp_path / "r.spool.partial", 7)
    said = rebuild(out_fd, tmp_path, "r.spool")
    assert said == (f"rebuilt {tmp_path / 'r.tar.gz'} from the dead run's spool ({records} records; "
                    "marked partial: s2_run_recovered, 7 torn bytes cut)")
    assert validate_members(read_archive(tmp_path / "r.tar.gz")) == []


def test_a_run_that_died_before_a_record_of_its_command_was_spooled_has_nothing_to_rebuild(
        tmp_path: Path, out_fd: int) -> None:
    """The header and the run's first phase are in the file, no drain of the command's records yet:
    an archive would say its root process was never seen (`failed`), which Assay refuses."""
    started = Phase(name="run_started", ts=1)
    (tmp_path / "r.spool.partial").write_bytes(encode_frame(HEADER) + encode_frame(started))
    said = rebuild(out_fd, tmp_path, "r.spool")
    assert said == (f"nothing to rebuild into {tmp_path / 'r.tar.gz'}: the run died before any record of its "
                    f"command reached the spool ({tmp_path / 'r.spool'} is kept, closed)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.spool"]
    assert read_spool(tmp_path / "r.spool").trailer.recovered == "runner_died"


@pytest.mark.parametrize("name", ["../atk/victim-run-42.spool", "sub/victim-run-42.spool", "..",
                                  "link.spool/x"])
def test_a_spool_name_that_is_a_path_is_refused_and_nothing_outside_is_touched(
        tmp_path: Path, name: str) -> None:
    """A record's spool name is data: `../` would reach a sibling directory the runner can write."""
    out, atk = tmp_path / "out", tmp_path / "atk"
    out.mkdir()
    atk.mkdir()
    partial_of(DATA / "example.spool", atk / "victim-run-42.spool.partial", 0)
    (out / "sub").symlink_to(atk)
    before = sorted(p.name for p in atk.iterdir())
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        said = rebuild(fd, out, name)
    finally:
        os.close(fd)
    assert said == (f"refused to rebuild from the spool name {name!r}: it is not a run id's spool; "
                    "nothing was touched")
    assert sorted(p.name for p in atk.iterdir()) == before
    assert sorted(p.name for p in out.iterdir()) == ["sub"]


def test_a_spool_that_is_a_symlink_is_never_followed(tmp_path: Path, out_fd: int) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    partial_of(DATA / "example.spool", elsewhere / "r.spool", 0)
    (tmp_path / "r.spool").symlink_to(elsewhere / "r.spool")
    said = rebuild(out_fd, tmp_path, "r.spool")
    assert said.startswith(f"cannot rebuild {tmp_path / 'r.tar.gz'}"), said
    assert not (tmp_path / "r.tar.gz").exists()
