"""The corroboration rules can disagree, not only agree.

`judge` is pure: a record and kernel lines in, a verdict out. Lines here have
the v0 kernel-line shape (golden/kernel-layer-variety.ndjson); the kernel
test (test_probe_matrix.py) runs the same rules on real archives.
"""

from __future__ import annotations

from typing import Any

import pytest

from probe_harness.corroborate import judge


def _record(verb: str, target: str, status: str, step: str | None = None, **args: Any) -> dict[str, Any]:
    op = {"step": step} if step else {}
    return {
        "probe": {"id": "p"},
        "run": {"mode": "workspace-write"},
        "operation": {"category": "x", "verb": verb, "target": target, "args": args},
        "result": {"observed_result": status},
        "payload": {"raw": {"op": op}},
    }


def _line(n: int, kind: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "value": value, "_line": n, **extra}


OPEN_W = {"access_mode": "write", "status": "success"}
OPEN_R = {"access_mode": "read", "status": "success"}
FAILED = {"access_mode": "write", "status": "error", "return_value": -13}
W = "/ws/f"

CASES = [
    (_record("write", W, "success"), [_line(1, "openat", W, flags=577, status="success")], "agree", "line"),
    (_record("write", W, "success"), [_line(1, "openat", W, flags=0, status="success")], "disagree", "line"),
    (_record("exec", "/ws/s.sh", "denied", "exec"), [_line(1, "event_101", "/ws/s.sh")], "agree", "line"),
    (_record("exec", "/ws/s.sh", "denied", "exec"), [], "disagree", "line"),
    (_record("spawn", "/bin/true", "denied", "spawn"), [_line(1, "event_101", "/bin/true")], "agree", "line"),
    (_record("spawn", "/bin/true", "denied", "spawn"), [], "disagree", "line"),
    # (record, lines, verdict, basis)
    (_record("write", W, "success"), [_line(1, "openat", W, **OPEN_W)], "agree", "line"),
    (_record("write", W, "success"), [], "disagree", "line"),
    (_record("write", W, "success"), [_line(1, "openat", W, **OPEN_R)], "disagree", "line"),
    (
        _record("write", W, "success"),
        [_line(1, "openat", W, **OPEN_W), _line(2, "file_blocked", W)],
        "disagree",
        "line",
    ),
    (_record("write", W, "denied", "open"), [_line(1, "file_blocked", W, **FAILED)], "agree", "line"),
    (_record("write", W, "denied", "open"), [_line(1, "openat", W, **FAILED)], "agree", "line"),
    (
        _record("write", W, "denied", "open"),
        [_line(1, "openat", W, status="error", return_value=-2)],
        "disagree",
        "line",
    ),
    (_record("write", W, "denied", "open"), [], "disagree", "line"),
    (_record("write", W, "denied", "open"), [_line(1, "openat", W, **OPEN_W)], "disagree", "line"),
    (_record("write", W, "denied", "symlink"), [], "agree", "absence"),
    (_record("write", "/proc/self/comm", "success"), [], "not_checked", None),
    (
        _record("write", "/proc/self/comm", "success"),
        [_line(1, "file_blocked", "/proc/self/comm")],
        "disagree",
        "line",
    ),
    (
        _record("write", "/proc/self/comm", "denied", "open"),
        [_line(1, "file_blocked", "/proc/self/comm")],
        "agree",
        "line",
    ),
    (_record("read", "/etc/x", "success"), [_line(1, "openat", "/etc/x", **OPEN_R)], "agree", "line"),
    (_record("connect", "10.0.0.2:80", "success"), [_line(1, "connect", "10.0.0.2:80")], "agree", "line"),
    (_record("connect", "10.0.0.2:80", "success"), [_line(1, "connect", "10.0.0.2:81")], "disagree", "line"),
    (
        _record("connect", "10.0.0.2:80", "denied", "connect"),
        [_line(1, "connect_blocked", "10.0.0.2:80")],
        "agree",
        "line",
    ),
    (_record("connect", "10.0.0.2:80", "denied", "connect"), [], "disagree", "line"),
    (_record("connect", "/ws/u.sock", "success"), [_line(1, "connect", "unix:/ws/u.sock")], "agree", "line"),
    (_record("connect", "/ws/u.sock", "denied", "bind"), [], "agree", "absence"),
    # a socket too long for sun_path is connected to by its name in its directory (probe-op)
    (
        _record("connect", "u1.sock", "success", family="unix"),
        [_line(1, "connect", "unix:u1.sock")],
        "agree",
        "line",
    ),
    (_record("connect", "u1.sock", "success", family="unix"), [], "disagree", "line"),
    (
        _record("connect", "/ws/u.sock", "denied", "bind"),
        [_line(1, "connect", "unix:/ws/u.sock")],
        "disagree",
        "line",
    ),
    (_record("send", "127.0.0.1:9", "success"), [_line(1, "event_6", "127.0.0.1:9")], "agree", "line"),
    (
        _record("send", "127.0.0.1:9", "denied", "sendto"),
        [_line(1, "connect_blocked", "127.0.0.1:9")],
        "agree",
        "line",
    ),
    (
        _record("spawn", "/bin/true", "success", children=2),
        [_line(1, "exec", "/bin/true")],
        "disagree",
        "line",
    ),
    (
        _record("spawn", "/bin/true", "success", children=2),
        [_line(i, "exec", "/bin/true") for i in (1, 2)],
        "agree",
        "line",
    ),
    (
        _record("exec", "/ws/s.sh", "denied", "create"),
        [_line(1, "file_blocked", "/ws/s.sh")],
        "agree",
        "line",
    ),
    (_record("exec", "/ws/s.sh", "denied", "create"), [], "disagree", "line"),
    (_record("exec", "/ws/s.sh", "success"), [_line(1, "exec", "/ws/s.sh")], "agree", "line"),
    (_record("write", W, "error"), [], "not_checked", None),
    (_record("teleport", W, "success"), [], "not_checked", None),
]


@pytest.mark.parametrize(("record", "lines", "verdict", "basis"), CASES)
def test_judge(record: dict, lines: list[dict], verdict: str, basis: str | None) -> None:
    entry = judge(record, lines)
    assert (entry["verdict"], entry["basis"]) == (verdict, basis), entry
    assert (entry["reason"] is None) == (verdict == "agree" and basis == "line")


def test_a_transient_random_name_still_joins() -> None:
    """The normalizer writes a created-and-removed random name as `prefix~N` (normalizer.transient)."""
    target = "/var/tmp/fence-outside-3-2012345678"
    record = _record("write", target, "success")
    assert (
        judge(record, [_line(1, "openat", "/var/tmp/fence-outside-3-2012~1", **OPEN_W)])["verdict"] == "agree"
    )
    assert (
        judge(record, [_line(1, "openat", "/var/tmp/fence-other-3-2012~1", **OPEN_W)])["verdict"]
        == "disagree"
    )
