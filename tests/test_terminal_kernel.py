"""The live status row on a real terminal, direct and through the daemon (both clients).

The real runner runs under a pty of 24x80 as a user's shell would start it;
its byte stream is rendered by pyte (tests/pty_screen.py) and the tests
assert on what the user sees: the command's partial lines, progress dots
and colours are never erased, the status shows on the last row while the
command runs and is gone after, a full-screen program and Ctrl-C leave the
terminal whole, and the kernel's idea of the terminal size is given back.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import pty_screen
from tests.daemon_support import CLI, daemon, shared_tmp
from tests.pty_screen import ROWS
from tests.support import runner_env, unique_run_id

pytestmark = pytest.mark.kernel

FAST = [str(Path(sys.executable).with_name("assay-runner"))]
STATUS = re.compile(r"^\[assay-runner\] \d+ events · \d+ drops · [\d.]+s$")
# 30 lines first: the command's output is at the bottom of the screen, where a status line drawn
# over the command's row (or a scroll region set wrong) would do its damage.


def _until(path: Path) -> str:
    """Shell that waits until the test creates `path`: the command goes on once the test has seen
    what it waits for on the screen, however long the runner takes to draw it."""
    return f"while [ ! -e {path} ]; do sleep 0.02; done"


def _dots(go: Path) -> str:
    """A pytest-like progress line that stops after its first dot until `go` exists."""
    return ("seq 30; printf '\\033[31mred text\\033[0m\\n'; printf 'test_slow.py '; "
            f"printf .; {_until(go)}; for i in 2 3 4 5 6 7 8; do printf .; sleep 0.15; done; "
            "printf ' [100%%]\\n'; printf 'partial'")


def _env() -> dict[str, str]:
    return runner_env(TERM="xterm-256color")


@pytest.fixture(scope="module")
def service() -> Iterator[Path]:
    """A daemon of this module, open to root's group: its socket."""
    root = shared_tmp()
    try:
        with daemon(root, 'group = "root"\n[access]\nallowed_groups = ["root"]\n') as d:
            yield d.socket
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _modes(service: Path) -> dict[str, list[str]]:
    return {"direct": [*CLI, "run", "--direct"], "python-client": [*CLI, "run", "--socket", str(service)],
            "fast-client": [*FAST, "run", "--socket", str(service)]}


def _run(tmp_path: Path, prefix: list[str], script: str,
         keys: Callable[[list[str]], pty_screen.Action] | None = None) -> pty_screen.Session:
    argv = [*prefix, "--out", str(tmp_path / "out"), "--run-id", unique_run_id("tty"), "--force",
            "--", "sh", "-c", script]
    return pty_screen.run(argv, tmp_path, _env(), keys)


def _status_seen(session: pty_screen.Session) -> bool:
    return any(STATUS.match(screen[ROWS - 1].rstrip()) for screen in session.screens)


@pytest.mark.parametrize("mode", ["direct", "python-client", "fast-client"])
def test_partial_lines_dots_and_colour_survive_the_status_row(tmp_path: Path, service: Path,
                                                              mode: str) -> None:
    go = tmp_path / "go"

    def keys(screen: list[str]) -> pty_screen.Action:
        dots = any(line.startswith("test_slow.py .") for line in screen)
        if dots and STATUS.match(screen[ROWS - 1].rstrip()):
            go.touch()  # the status row and the growing dots line on one screen: the dots go on
        return None

    session = _run(tmp_path, _modes(service)[mode], _dots(go), keys)
    assert session.code == 0, session.data[-2000:]
    assert _status_seen(session), session.lines  # it was drawn, on the last row
    printed = together = False
    for screen in session.screens:  # once printed, the dots line is never erased or overwritten
        dots = [line.rstrip() for line in screen if line.startswith("test_slow.py")]
        printed = printed or bool(dots)
        if printed and "[100%]" not in "".join(screen):
            # rstripped: a screen drawn before the first dot ends at "test_slow.py"
            assert dots and re.fullmatch(r"test_slow\.py( \.*)?", dots[0]), screen
            together = together or bool(STATUS.match(screen[ROWS - 1].rstrip()))
    assert together, "the status row and the growing dots line were on one screen"
    lines = session.lines
    assert "test_slow.py ........ [100%]" in lines
    assert "red text" in lines and "30" in lines and "29" in lines
    row = lines.index("red text")
    assert session.final is not None and session.final.buffer[row][0].fg == "red"
    assert any(line.startswith("partial") for line in lines)  # the command's last, unfinished line
    assert any(line.startswith("assay-runner: command exited 0") or "assay-runner: command exited 0" in line
               for line in lines)
    assert not any(STATUS.match(line) for line in lines)  # taken down at the end
    assert session.rows_after == ROWS  # the kernel's terminal size given back
    numbers = [line for line in lines if line.isdigit()]
    assert numbers == [str(n) for n in range(int(numbers[0]), 31)]  # no line lost or doubled by scrolling


@pytest.mark.parametrize("mode", ["direct", "fast-client"])
def test_a_full_screen_program_and_the_status_row(tmp_path: Path, service: Path, mode: str) -> None:
    """`less` (alternate screen, keys from the terminal) and `vim -es` under the runner: after they
    quit, the terminal is whole: what came before and after is there, the size is given back."""
    page = tmp_path / "page.txt"
    page.write_text("".join(f"page line {n}\n" for n in range(5)))
    vim = f"vim -u NONE -es -c 'call setline(1, \"x\")' -c wq {tmp_path / 'v'}"
    before, after = tmp_path / "before", tmp_path / "after"  # each once the status row was drawn there
    script = f"echo before-less; {_until(before)}; less {page}; {vim}; echo after-less; {_until(after)}"
    typed = []

    def keys(screen: list[str]) -> pty_screen.Action:
        shown = [line.rstrip() for line in screen]
        if STATUS.match(shown[-1]):
            (after if "after-less" in shown else before).touch()
        if not typed and any("(END)" in line for line in screen):
            typed.append(True)
            return b"q"
        return None

    session = _run(tmp_path, _modes(service)[mode], script, keys)
    assert session.code == 0, session.data[-2000:]
    assert typed, session.lines  # less showed its page
    saw_page = [s for s in session.screens if any("(END)" in line for line in s)]
    assert all("page line 0" in "".join(s) for s in saw_page)
    assert "x" in (tmp_path / "v").read_text()
    lines = session.lines
    assert "before-less" in lines and "after-less" in lines
    assert not any(STATUS.match(line) for line in lines)
    assert session.rows_after == ROWS


@pytest.mark.parametrize("mode", ["direct", "python-client", "fast-client"])
def test_ctrl_c_leaves_the_terminal_whole(tmp_path: Path, service: Path, mode: str) -> None:
    typed = []

    def keys(screen: list[str]) -> pty_screen.Action:
        shown = [line.rstrip() for line in screen]
        if not typed and STATUS.match(shown[-1]) and "started" in shown and "half a line" in shown:
            typed.append(True)
            return b"\x03"
        return None

    session = _run(tmp_path, _modes(service)[mode], "echo started; printf 'half a line'; sleep 60", keys)
    assert typed, session.lines
    assert session.code == 130, session.data[-2000:]
    lines = session.lines
    assert "started" in lines and any(line.startswith("half a line") for line in lines)
    assert not any(STATUS.match(line) for line in lines)
    assert session.rows_after == ROWS


@pytest.mark.parametrize("mode", ["direct", "fast-client"])
def test_the_status_row_follows_a_resize(tmp_path: Path, service: Path, mode: str) -> None:
    """The terminal grows to 30 rows while the command runs: the status moves to the new last row, the
    command's lines stay, and the kernel's size is given back as the new one."""
    rows = 30
    resized = []
    moved = tmp_path / "moved"

    def keys(screen: list[str]) -> pty_screen.Action:
        if not resized and STATUS.match(screen[-1].rstrip()):
            resized.append(True)
            return (rows, 80)
        if resized and len(screen) == rows and STATUS.match(screen[rows - 1].rstrip()):
            moved.touch()  # drawn on the new last row: the command may end
        return None

    script = f"seq 30; {_until(moved)}; echo after-resize"
    session = _run(tmp_path, _modes(service)[mode], script, keys)
    assert session.code == 0 and resized, session.data[-2000:]
    later = session.screens[next(i for i, s in enumerate(session.screens) if len(s) == rows):]
    assert any(STATUS.match(s[rows - 1].rstrip()) for s in later), later[-1]
    assert not any(STATUS.match(s[ROWS - 1].rstrip()) for s in later[-1:])  # not left at the old last row
    lines = session.lines
    assert "after-resize" in lines and "30" in lines
    assert not any(STATUS.match(line) for line in lines)
    assert session.rows_after == rows


def test_no_live_line_on_a_dumb_terminal(tmp_path: Path) -> None:
    for env in ({"TERM": "dumb"}, {"TERM": ""}):
        argv = [*CLI, "run", "--direct", "--out", str(tmp_path / "out"), "--run-id", unique_run_id("dumb"),
                "--force", "--", "sh", "-c", "echo hi; sleep 0.8"]
        session = pty_screen.run(argv, tmp_path, runner_env(**env))
        assert session.code == 0
        assert b"[assay-runner] " not in session.data and b"\x1b7" not in session.data  # no status, no region

