"""Strict run-id checking at every entry point that takes one from outside.

`run`, `determinism` and `normalize --run-id` are covered in test_run_inputs.py;
here: the daemon's request decoder, a spool whose header carries a bad id,
and `show`/`report` on an archive whose run id is not one Assay accepts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from runner.daemon import protocol
from spool.format import encode_frame, iter_frames
from tests.bombs import GOLDEN, measure_cli

DATA = Path(__file__).resolve().parent / "data"
BAD = ["a.b", "run_1\n", "", "../up", "rün", "x" * 129]


@pytest.mark.parametrize("run_id", BAD)
def test_the_daemon_refuses_a_bad_run_id_when_it_decodes_the_request(run_id: str) -> None:
    msg = protocol.RunStart(version=protocol.VERSION, run_id=run_id, exe=b"/bin/true", argv=[b"true"],
                            env={}, workdir=b"/tmp", out_display="out", ringbuf_pages=64)
    with pytest.raises(protocol.ProtocolError, match="invalid run id"):
        protocol.decode_client(protocol.encode(msg)[4:])


@pytest.mark.parametrize("run_id", ["evil\n", "a.b", "x" * 129])
def test_normalize_refuses_a_spool_whose_run_id_is_bad(tmp_path: Path, run_id: str) -> None:
    with open(DATA / "example.spool", "rb") as f:
        frames = list(iter_frames(f))
    frames[0] = msgspec.structs.replace(frames[0], run_id=run_id)
    spool = tmp_path / "bad.spool"
    spool.write_bytes(b"".join(map(encode_frame, frames)))
    run = measure_cli("normalize", spool, "--out", tmp_path / "bad.tar.gz", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "is not one Assay accepts: give a new one with --run-id" in run.stderr
    assert not (tmp_path / "bad.tar.gz").exists()
    fixed = measure_cli("normalize", spool, "--out", tmp_path / "ok.tar.gz", "--run-id", "ok", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr


@pytest.mark.parametrize("command", ["show", "report"])
def test_show_and_report_refuse_an_archive_with_a_bad_run_id(tmp_path: Path, command: str) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(GOLDEN, archive)
    for file in archive.rglob("*"):
        if file.is_file():
            file.write_bytes(file.read_bytes().replace(b'"run_minimal"', b'"evil\\n"'))
    args = ["-o", tmp_path / "r.html"] if command == "report" else []
    run = measure_cli(command, "--no-spool", archive, *args, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "run id 'evil\\n' is not one Assay accepts" in run.stderr
    assert not (tmp_path / "r.html").exists()
