"""The shipped systemd units pass `systemd-analyze verify` and start the daemon the CLI knows."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[1] / "packaging" / "systemd"
INSTALLED = "/usr/local/bin/assay-runner"
"""Where docs/daemon.md installs the entry point; the test points the copy at this checkout's."""


def _exec_start(service: str) -> list[str]:
    line = next(ln for ln in service.splitlines() if ln.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_units_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/setup.sh installs the systemd package"
    entry = Path(sys.executable).with_name("assay-runner")
    assert entry.exists(), f"{entry}: run make setup"
    service = (UNITS / "assay-runner.service").read_text()
    assert _exec_start(service)[0] == INSTALLED
    copy = service.replace(f"ExecStart={INSTALLED}", f"ExecStart={entry}")
    (tmp_path / "assay-runner.service").write_text(copy)
    shutil.copy(UNITS / "assay-runner.socket", tmp_path)
    proc = subprocess.run([analyze, "verify", "assay-runner.socket", "assay-runner.service"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("unit", ["assay-runner.socket", "assay-runner.service"])
def test_socket_is_the_daemons_default_and_group_only(unit: str) -> None:
    text = (UNITS / unit).read_text()
    if unit.endswith(".socket"):
        assert "ListenStream=/run/assay-runner/runner.sock" in text
        assert "SocketMode=0660" in text and "SocketGroup=assay-runner" in text
    else:
        args = _exec_start(text)[1:]
        from runner.cli.main import build_parser

        parsed = build_parser().parse_args(args)
        assert parsed.command == "daemon" and parsed.action == "serve"
