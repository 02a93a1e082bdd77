"""The capture phases without root: a recorded spool replayed through `phases.capture`.

The monitor is a `ReplaySource` over tests/data spools, the command and its
process group are small stand-ins (real child processes where signals
matter), so phase order, the final drain and every way a run ends are
checked against the real drain loop and spool writer.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.capture.control import End, Interrupt
from runner.capture.interrupt import HANDLED, Interrupted, Interruptions, run_exit_code
from runner.capture.phases import HOLD_ENV, capture
from runner.capture.replay import ReplaySource
from spool.format import SPOOL_FORMAT, SpoolHeader, SpoolRecords, SpoolTrailer, read_spool
from spool.writer import Spooler

DATA = Path(__file__).parent / "data"


class OrderedSpooler(Spooler):
    def __init__(self, path: Path, order: list[str]) -> None:
        self.dir = path.parent
        header = SpoolHeader(format=SPOOL_FORMAT, run_id="r", argv=["x"], workdir="/", control_pids=[],
                             shim_pid=0, ringbuf_pages=64)
        super().__init__(os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY), path.name, header)
        self.order = order

    def phase(self, name: str) -> None:
        self.order.append(name)
        super().phase(name)


class Command:
    """Exits with `code` once `exit_when()` says so; remembers what it was sent."""

    def __init__(self, order: list[str], exit_when: Callable[[], bool], code: int = 0,
                 helper_pid: int = -1) -> None:
        self.order, self.exit_when, self.code = order, exit_when, code
        self.helper_pid, self.shim_pid = helper_pid, -2
        self.exit_fd: int | None = None
        self.signals: list[int] = []

    def start(self) -> None:
        self.order.append("go")

    def poll(self) -> int | None:
        return self.code if self.exit_when() else None

    def signal(self, signum: int) -> None:
        self.signals.append(signum)


class Group:
    def __init__(self) -> None:
        self.killed = 0

    def kill(self) -> None:
        self.killed += 1


class Sdk:
    def take_messages(self) -> list:
        return []

    def stop(self) -> None:
        pass


class Control:
    """Hands out scripted requests, one list per drain-loop turn."""

    def __init__(self, script: list[list]) -> None:
        self.script = script
        self.progress_calls = 0

    def progress(self, events, drops) -> None:
        self.progress_calls += 1

    def requests(self) -> list:
        return self.script.pop(0) if self.script else []

    def done(self) -> None:
        pass


def _finish(spooler: OrderedSpooler, code: int, ended_by: str | None) -> Path:
    name = spooler.finish(SpoolTrailer(exit_code=code, drops={}, emitted={}, ended_by=ended_by))
    os.close(spooler.dir_fd)
    return spooler.dir / name


@pytest.mark.parametrize("recording", ["example.spool", "threads.spool"])
def test_phases_in_order_and_the_final_drain_loses_nothing(tmp_path: Path, recording: str) -> None:
    source = ReplaySource(DATA / recording, per_drain=10)
    assert source.remaining >= 2, "the recording needs several batches for this test"
    order: list[str] = []
    spooler = OrderedSpooler(tmp_path / "s.spool", order)
    command = Command(order, lambda: source.remaining == 1, code=3)  # exits with one batch still queued
    code, ended_by = capture(source, spooler, command, Group(), Sdk(), Control([]))
    assert (code, ended_by) == (3, None)
    assert order == ["run_started", "go", "command_exited", "run_finished"]
    spool = read_spool(_finish(spooler, code, ended_by))
    assert list(spool.records) == list(SpoolRecords(DATA / recording))
    assert [p.name for p in spool.phases] == ["run_started", "command_exited", "run_finished"]


def test_an_end_request_kills_the_group_and_says_why(tmp_path: Path) -> None:
    source = ReplaySource(DATA / "example.spool")
    group = Group()
    order: list[str] = []
    command = Command(order, lambda: group.killed > 0, code=137)
    code, ended_by = capture(source, OrderedSpooler(tmp_path / "s.spool", order), command, group, Sdk(),
                             Control([[], [End(reason="daemon_shutdown")]]))
    assert (code, ended_by, group.killed) == (137, "daemon_shutdown", 1)
    assert order[-2:] == ["command_exited", "run_finished"]


def test_a_clients_ctrl_c_kills_the_group_at_once_as_sigint(tmp_path: Path) -> None:
    group = Group()
    order: list[str] = []
    command = Command(order, lambda: group.killed > 0, code=137)
    spooler = OrderedSpooler(tmp_path / "s.spool", order)
    code, ended_by = capture(ReplaySource(DATA / "example.spool"), spooler, command, group, Sdk(),
                             Control([[Interrupt()], [Interrupt()]]))
    assert (code, ended_by, group.killed) == (137, "sigint", 1)  # killed once, however often asked
    assert run_exit_code(code, ended_by) == 130


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_runner_kills_the_group_and_is_recorded(tmp_path: Path, signum: int) -> None:
    group = Group()
    sent = iter([True, True])
    order: list[str] = []

    def exit_when() -> bool:
        if next(sent, False):
            os.kill(os.getpid(), signum)  # the runner itself is asked to stop, twice
        return group.killed > 0

    command = Command(order, exit_when, code=137)
    before = signal.getsignal(signum)
    with Interruptions() as interrupts:
        interrupts.phase = "command"
        spooler = OrderedSpooler(tmp_path / "s.spool", order)
        code, ended_by = capture(ReplaySource(DATA / "example.spool"), spooler, command, group, Sdk(),
                                 Control([]), interrupts=interrupts)
    assert group.killed == 1 and (code, ended_by) == (137, signal.Signals(signum).name.lower())
    assert command.signals == []  # nothing forwarded: the tree is killed at once
    assert run_exit_code(code, ended_by) == 128 + signum
    assert signal.getsignal(signum) == before  # the runner's own handler is back


def test_a_ctrl_c_the_command_died_of_first_is_still_the_runs_end(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the command's process group too: the command may exit of it
    before the loop sees the runner's signal. The run was still ended by SIGINT."""
    group = Group()
    order: list[str] = []

    def exit_when() -> bool:
        os.kill(os.getpid(), signal.SIGINT)  # the runner's copy of the signal ...
        return True  # ... and the command already dead of its own

    command = Command(order, exit_when, code=130)
    with Interruptions() as interrupts:
        interrupts.phase = "command"
        spooler = OrderedSpooler(tmp_path / "s.spool", order)
        code, ended_by = capture(ReplaySource(DATA / "example.spool"), spooler, command, group, Sdk(),
                                 Control([]), interrupts=interrupts)
    assert (code, ended_by, group.killed) == (130, "sigint", 0)


def test_a_promised_graceful_end_forwards_the_first_sigterm_and_kills_at_the_second(tmp_path: Path) -> None:
    group = Group()
    turns = iter(range(10_000))
    order: list[str] = []

    def exit_when() -> bool:
        turn = next(turns)
        if turn in (1, 3):
            os.kill(os.getpid(), signal.SIGTERM)
        return group.killed > 0

    command = Command(order, exit_when, code=137)
    with Interruptions(forward_first=True) as interrupts:
        interrupts.phase = "command"
        spooler = OrderedSpooler(tmp_path / "s.spool", order)
        code, ended_by = capture(ReplaySource(DATA / "example.spool"), spooler, command, group, Sdk(),
                                 Control([]), interrupts=interrupts)
    assert command.signals == [signal.SIGTERM] and group.killed == 1
    assert (code, ended_by) == (137, "sigterm")


def test_a_signal_during_setup_stops_it_with_the_signals_exit_code() -> None:
    with Interruptions() as interrupts:
        interrupts.check_setup()  # nothing received: set-up goes on
        os.kill(os.getpid(), signal.SIGHUP)
        with pytest.raises(Interrupted) as caught:
            interrupts.check_setup()
    assert caught.value.exit_code == 129 and "during setup" in str(caught.value)


def test_publication_finishes_after_one_signal_and_is_abandoned_at_a_second(
        capsys: pytest.CaptureFixture[str]) -> None:
    with Interruptions() as interrupts:
        interrupts.phase = "command"
        os.kill(os.getpid(), signal.SIGTERM)  # ended the run: publication counts afresh
        interrupts.enter_publish()
        os.kill(os.getpid(), signal.SIGTERM)
        assert "finishing its archive" in capsys.readouterr().err
        with pytest.raises(Interrupted) as caught:
            os.kill(os.getpid(), signal.SIGINT)
    assert caught.value.exit_code == 130 and "abandoned" in str(caught.value)


def test_once_the_archive_is_written_signals_change_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """`run` exits after its run: a signal after the archive is in place (while the summary prints,
    or the interpreter exits) must not turn the written archive into 130 or a death by SIGINT."""
    before = {s: signal.getsignal(s) for s in HANDLED}
    try:
        with Interruptions(final=True) as interrupts:
            interrupts.enter_publish()
            os.kill(os.getpid(), signal.SIGTERM)  # acknowledged: the archive goes on
            interrupts.published()
            os.kill(os.getpid(), signal.SIGINT)  # would abandon it, but it is written
        assert capsys.readouterr().err.count("finishing its archive") == 1
        assert all(signal.getsignal(s) == signal.SIG_IGN for s in HANDLED)  # until the process exits
        os.kill(os.getpid(), signal.SIGINT)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_a_run_that_is_not_the_process_last_gives_the_handlers_back() -> None:
    """`determinism` runs several runs in one process: Ctrl-C between them must still stop it."""
    before = {s: signal.getsignal(s) for s in HANDLED}
    with Interruptions() as interrupts:
        interrupts.enter_publish()
        interrupts.published()
    assert {s: signal.getsignal(s) for s in HANDLED} == before


def test_end_requests_keep_the_commands_exit_code() -> None:
    assert run_exit_code(137, "client_disconnected") == 137
    assert run_exit_code(3, None) == 3


def test_a_held_ring_is_not_read_until_the_command_exits(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """HOLD_ENV, the drop tests' seam: a consumer that is not draining, then the final drain."""
    monkeypatch.setenv(HOLD_ENV, "1")
    source = ReplaySource(DATA / "threads.spool", per_drain=10)
    before = source.remaining
    order: list[str] = []
    during: list[int] = []
    turns = iter(range(100))

    def exit_when() -> bool:
        during.append(source.remaining)
        return next(turns) == 5

    command = Command(order, exit_when)
    capture(source, OrderedSpooler(tmp_path / "s.spool", order), command, Group(), Sdk(), Control([]))
    assert during == [before] * 6  # six turns of the loop, not one record read
    assert source.remaining < before  # the final drain still ran
    assert order == ["run_started", "go", "command_exited", "run_finished"]
