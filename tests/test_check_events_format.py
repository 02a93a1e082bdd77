"""check-events, rule family `format`: UTF-8, one JSON object per line, newline-terminated."""

from __future__ import annotations

from blackbox.check import check_bytes
from tests.events_support import check, dump, load, only


def test_recorded_runs_are_valid() -> None:
    assert check(load("pass")) == []
    assert check(load("fail")) == []
    assert check(load("claude-logged-out")) == []


def test_non_utf8_line_is_rejected_with_its_line_number() -> None:
    data = dump(load()).split(b"\n")
    data[2] = data[2].replace(b"agent process started", b"agent \xff started")
    found = check_bytes(b"\n".join(data))
    assert any(v.line == 3 and v.rule == "format" and "not UTF-8" in v.message for v in found)


def test_line_that_is_not_json_or_not_an_object() -> None:
    lines = dump(load()).split(b"\n")
    lines[1] = b"{not json"
    lines[4] = b"[1, 2]"
    found = [v for v in check_bytes(b"\n".join(lines)) if v.rule == "format"]
    assert [(v.line, v.message.split(" (")[0]) for v in found] == [
        (2, "not valid JSON"), (5, "a line must be a JSON object, got list")]


def test_torn_last_line_and_empty_file() -> None:
    torn = dump(load())[:-1]
    assert only(check_bytes(torn), "format")[0].line == 9
    assert [v.rule for v in check_bytes(b"")] == ["format"]
