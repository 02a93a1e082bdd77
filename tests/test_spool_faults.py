"""The spool under faults, without root: flushed at every drain, whole frames on a failed write, recovered.

A failed write is a real one: the writer runs in a child whose RLIMIT_FSIZE
makes the kernel refuse the write that would pass it (EFBIG), as ENOSPC
refuses one on a full disk (the kernel tests fill a real tmpfs).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
from pathlib import Path

import pytest

from normalizer.build import normalize
from runner.evidence.archive import MANIFEST, build_manifest
from runner.evidence.validate import validate_members
from spool.format import Batch, SpoolTrailer, iter_frames, read_spool
from spool.recover import CannotRecover, recover
from spool.writer import Spooler, SpoolWriteFailed
from tests.partial_spools import DATA, HEADER, partial_of


def _dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_every_drain_reaches_the_file_at_once(tmp_path: Path) -> None:
    fd = _dir(tmp_path)
    spooler = Spooler(fd, "s.spool", HEADER)
    partial = tmp_path / "s.spool.partial"
    before = partial.stat().st_size
    assert before > 0  # the header is on disk before the command may start
    for n in range(3):
        spooler.add(b"r" * 64)
        spooler.flush()
        # what a SIGKILL right now would leave: every drained record, readable
        kept = [f for f in iter_frames(partial.open("rb")) if isinstance(f, Batch)]
        assert sum(len(b.records) for b in kept) == n + 1
    spooler.discard()
    os.close(fd)


def test_a_failed_write_keeps_whole_frames_and_the_run_goes_on(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
            fd = _dir(tmp_path)
            spooler = Spooler(fd, "s.spool", HEADER)
            for _ in range(100):  # 100 drains of 3 records: far past 4 KiB
                for _ in range(3):
                    spooler.add(b"r" * 50)
                spooler.flush()
            try:
                spooler.finish(SpoolTrailer(exit_code=0, drops={}, emitted={}))
                report = "finished"
            except SpoolWriteFailed as exc:
                report = f"failed {exc.error.errno} {spooler.records} {exc.unwritten}"
        except BaseException as exc:
            report = f"crashed {exc!r}"
        os.write(write_end, report.encode())
        os._exit(0)
    os.close(write_end)
    words = os.read(read_end, 200).decode().split()
    os.waitpid(pid, 0)
    assert words[:2] == ["failed", "27"], words  # EFBIG
    written, unwritten = int(words[2]), int(words[3])
    assert 0 < written < 300 and written + unwritten == 300
    partial = tmp_path / "s.spool.partial"
    assert partial.stat().st_size <= 4096
    frames = list(iter_frames(partial.open("rb")))  # no torn frame: reads to the end
    assert sum(len(f.records) for f in frames if isinstance(f, Batch)) == written
    assert not (tmp_path / "s.spool").exists()


@pytest.mark.parametrize("torn", [0, 3, 40])
def test_a_dead_runners_spool_is_recovered_into_an_archive_marked_partial(tmp_path: Path, torn: int) -> None:
    records = partial_of(DATA / "example.spool", tmp_path / "r.spool.partial", torn)
    fd = _dir(tmp_path)
    got = recover(fd, "r.spool", "runner_died")
    os.close(fd)
    assert (got.records, got.cut_bytes) == (records, torn)
    assert not (tmp_path / "r.spool.partial").exists()
    spool = read_spool(tmp_path / "r.spool")
    assert spool.trailer.recovered == "runner_died" and spool.trailer.exit_code == -1
    run = normalize(spool, "recovered")
    assert run.health.cgroup_correlation == "partial"
    assert any(n.startswith("s2_run_recovered: cause=runner_died ") for n in run.health.notes)
    members = {n: m if isinstance(m, bytes) else m.read_bytes() for n, m in run.members().items()}
    assert validate_members({MANIFEST: build_manifest(run.run_id, run.members()), **members}) == []


def test_recovery_replaces_nothing_and_needs_a_header(tmp_path: Path) -> None:
    partial_of(DATA / "example.spool", tmp_path / "r.spool.partial", 0)
    shutil.copy(DATA / "example.spool", tmp_path / "r.spool")
    (tmp_path / "h.spool.partial").write_bytes(b"\x05\x00\x00\x00garbage")
    fd = _dir(tmp_path)
    try:
        with pytest.raises(CannotRecover, match="already exists"):
            recover(fd, "r.spool", "runner_died")
        with pytest.raises(CannotRecover, match="no spool header"):
            recover(fd, "h.spool", "runner_died")
    finally:
        os.close(fd)
    assert (tmp_path / "r.spool").read_bytes() == (DATA / "example.spool").read_bytes()
    assert (tmp_path / "r.spool.partial").exists() and (tmp_path / "h.spool.partial").exists()
