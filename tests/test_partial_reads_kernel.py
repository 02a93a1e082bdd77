"""No silent partial read: user memory the kernel program cannot read is read again or counted,
and a syscall a signal interrupts is one line, not two (tests/programs/evasion.py does each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.evasion_support import evade, work

pytestmark = pytest.mark.kernel
__all__ = ["work"]


def _opens(archive, path: str, access: str | None = None) -> list[dict]:
    return [e for e in archive.kernel if e["kind"] == "openat" and e["value"] == path
            and access in (None, e["access_mode"])]


def _unread(archive) -> str:
    return next(n for n in archive.health["notes"] if n.startswith("s2_unread_user_memory: "))


def test_openat2_how_off_its_page_is_read_again_or_marked_unknown(tmp_path: Path, work: Path) -> None:
    archive = evade(tmp_path, work, "unread_how", "nobody")
    (created,) = _opens(archive, f"{work}/created")
    assert created["access_mode"] == "write" and "create" in created["operation_flags"], created
    (never,) = _opens(archive, f"{work}/never")  # EFAULT for the kernel too: access unknown, counted
    assert never["access_mode"] == "unknown" and never["return_value"] == -14, never
    assert "open=1" in _unread(archive).split()


def test_unreadable_argv_pointer_is_counted(tmp_path: Path, work: Path) -> None:
    archive = evade(tmp_path, work, "unread_argv", "nobody")
    assert "exec_argv=1" in _unread(archive).split()


def test_msghdr_off_its_page_gives_the_peer_and_a_bad_one_counts(tmp_path: Path, work: Path) -> None:
    archive = evade(tmp_path, work, "unread_msghdr", "nobody")
    assert archive.values("event_7") == [f"unix:{work}/peer", None]  # the bad header: peer unknown
    assert "sendmsg=1" in _unread(archive).split()


def test_restarted_open_is_one_line(tmp_path: Path, work: Path) -> None:
    archive = evade(tmp_path, work, "interrupted_restarted", "nobody")
    (line,) = _opens(archive, f"{work}/fifo", "read")  # the writer's open is the child's
    assert "return_value" not in line, line
    assert not [e for e in archive.kernel if -516 <= e.get("return_value", 0) <= -512]


def test_interrupted_open_that_gave_eintr_is_one_failed_line(tmp_path: Path, work: Path) -> None:
    archive = evade(tmp_path, work, "interrupted_eintr", "nobody")
    (line,) = _opens(archive, f"{work}/fifo", "read")  # the writer's open is the child's
    assert line["return_value"] == -4 and line["status"] == "error", line
    assert _opens(archive, f"{work}/./notes.txt") or _opens(archive, f"{work}/notes.txt")
    assert not [e for e in archive.kernel if -516 <= e.get("return_value", 0) <= -512]
