"""Every exec with its argv and result, and how each process ended, from the real kernel.

Written as what an agent does: run programs with odd and long arguments, try
programs that do not exist, exit with a status, die by a signal. The command
log (normalizer/execlog.py) must show each of them; the failed exec is also
an `event_101` line of the kernel layer.
"""

from __future__ import annotations

import pytest

from normalizer.execlog import ExecLog, ExitStatus, exec_log
from spool.format import read_spool
from tests.support import Archive, assay, run_observed

pytestmark = pytest.mark.kernel

LONG = "x" * 5000
SCRIPT = (
    '/bin/echo hello "two words" > /dev/null; '
    "/no/such/prog a b 2>/dev/null; "
    'sh -c "exit 3"; '
    'sh -c "kill -TERM \\$\\$"; '
    f"/bin/true {LONG}; "
    "/bin/true " + " ".join(str(i) for i in range(40)) + "; "
    "exit 0"
)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> tuple[ExecLog, Archive]:
    out = tmp_path_factory.mktemp("out")
    work = tmp_path_factory.mktemp("work")
    proc = run_observed(out, "execlog", "/bin/sh", "-c", SCRIPT, workdir=work)
    assert proc.returncode == 0, proc.stderr
    return exec_log(read_spool(out / "execlog.spool")), Archive(out / "execlog.tar.gz")


def _by_argv0(log: ExecLog, argv0: bytes) -> list:
    return [r for r in log.execs if r.argv[:1] == [argv0]]


def test_argv_and_cwd_of_a_successful_exec(observed, tmp_path_factory) -> None:
    log, _ = observed
    (echo,) = _by_argv0(log, b"/bin/echo")
    assert echo.argv == [b"/bin/echo", b"hello", b"two words"]
    assert echo.argv_complete
    assert echo.result == "success" and echo.path == "/bin/echo"
    assert echo.cwd is not None and echo.cwd.startswith(str(tmp_path_factory.getbasetemp()))
    assert echo.exit == ExitStatus("exited", 0)


def test_failed_exec_is_in_the_log_and_the_kernel_layer(observed) -> None:
    log, archive = observed
    (failed,) = _by_argv0(log, b"/no/such/prog")
    assert failed.result == "error" and failed.errno == 2  # ENOENT
    assert failed.argv == [b"/no/such/prog", b"a", b"b"]
    lines = [e for e in archive.kernel if e["kind"] == "event_101"]
    assert [e["value"] for e in lines] == ["/no/such/prog"]
    assert "/no/such/prog" not in archive.surface["process_execs"]
    assert assay("validate", archive.path).returncode == 0


def test_exit_status_and_death_by_signal(observed) -> None:
    log, _ = observed
    shells = [r for r in _by_argv0(log, b"sh") if len(r.argv) == 3]
    exits = {r.argv[2]: r.exit for r in shells}
    assert exits[b"exit 3"] == ExitStatus("exited", 3)
    assert exits[b"kill -TERM $$"] == ExitStatus("signaled", 15)
    root = log.execs[0]
    assert root.process == 1 and root.argv[:2] == [b"/bin/sh", b"-c"]
    assert log.exits[1] == ExitStatus("exited", 0)


def test_long_and_many_arguments_are_marked_incomplete(observed) -> None:
    log, _ = observed
    trues = _by_argv0(log, b"/bin/true")
    long_one = next(r for r in trues if len(r.argv) == 2)
    assert not long_one.argv_complete
    assert long_one.argv[1] == LONG[:4095].encode()
    many = next(r for r in trues if len(r.argv) > 2)
    assert not many.argv_complete
    assert many.argv[1:] == [str(i).encode() for i in range(31)]

