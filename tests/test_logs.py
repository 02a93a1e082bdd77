"""Log calls below the shown level cost nothing: structlog (tens of ms to import) loads only
when a line is really written, so a terminal run without warnings starts without it."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = ("import sys\n"
         "from runner.logs import configure_logging, get_logger\n"
         "configure_logging({fmt!r}, {verbose})\n"
         "log = get_logger('t')\n"
         "log.info('quiet', n=1)\n"
         "print('structlog' in sys.modules)\n"
         "log.warning('loud', n=2)\n"
         "print('structlog' in sys.modules)\n")


@pytest.mark.parametrize(("fmt", "verbose", "info_shown"),
                         [("console", False, False), ("console", True, True), ("json", False, True)])
def test_structlog_loads_only_for_a_line_that_is_shown(fmt: str, verbose: bool, info_shown: bool) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(fmt=fmt, verbose=verbose)],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.split() == [str(info_shown), "True"]
    assert ("quiet" in proc.stderr) is info_shown
    assert "loud" in proc.stderr
    assert proc.stderr.count("\n") == 1 + info_shown
