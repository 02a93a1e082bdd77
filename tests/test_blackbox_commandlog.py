"""The command log from exec records: PATH searches folded, exits on each process's last image, paths."""

from __future__ import annotations

from blackbox.capture import apply_mode, apply_mode_argv
from blackbox.commandlog import build_commands, relative_to
from normalizer.execlog import ExecLog, ExecRecord, ExitStatus

WS = "/runs/r1/workspace"


def rec(process: int, order: int, argv: list[bytes], path: str, result: str = "success",
        errno: int | None = None, cwd: str = WS) -> ExecRecord:
    return ExecRecord(process=process, thread_rank=0, order=order, path=path, argv=argv, argv_complete=True,
                      cwd=cwd, result=result, errno=errno)


def test_path_search_folds_into_the_exec_that_worked() -> None:
    log = ExecLog([
        rec(1, 1, [b"agent"], f"{WS}/agent"),
        rec(2, 5, [b"ls"], "/usr/local/bin/ls", "error", 2, cwd=f"{WS}/logs"),
        rec(2, 6, [b"ls"], "/usr/bin/ls", cwd=f"{WS}/logs"),
        rec(3, 9, [b"nope", b"-v"], "/usr/local/bin/nope", "error", 2),
        rec(3, 10, [b"nope", b"-v"], "/usr/bin/nope", "error", 2),
    ], {1: ExitStatus("exited", 0), 2: ExitStatus("exited", 0), 3: ExitStatus("exited", 255)})
    cmds = build_commands(log, WS)
    assert [(c.index, c.argv, c.path, c.cwd, c.result, c.errno, c.attempts, c.exit) for c in cmds] == [
        (1, ("agent",), "./agent", ".", "success", None, 1, {"how": "exited", "code": 0}),
        (2, ("ls",), "/usr/bin/ls", "./logs", "success", None, 2, {"how": "exited", "code": 0}),
        (3, ("nope", "-v"), "/usr/bin/nope", ".", "error", "ENOENT", 2, {"how": "exited", "code": 255}),
    ]


def test_exec_chain_marks_replaced_images_and_signals_are_named() -> None:
    log = ExecLog([
        rec(1, 1, [b"env", b"python3", b"x.py"], "/usr/bin/env"),
        rec(1, 3, [b"python3", b"x.py"], "/usr/local/bin/python3", "error", 2),
        rec(1, 4, [b"python3", b"x.py"], "/usr/bin/python3"),
        rec(1, 8, [b"oops"], "/usr/bin/oops", "error", 13),
        rec(2, 9, [b"sleep", b"60"], "/usr/bin/sleep"),
    ], {1: ExitStatus("signaled", 9)})
    cmds = build_commands(log, WS)
    assert [(c.argv[0], c.replaced_by_exec, c.exit, c.outcome()) for c in cmds] == [
        ("env", True, None, "replaced by exec"),
        ("python3", False, {"how": "signaled", "signal": "SIGKILL", "code": 9}, "signal SIGKILL"),
        ("oops", False, None, "exec error EACCES"),
        ("sleep", False, None, "still running at capture end"),
    ]


def test_undecodable_argv_bytes_never_raise() -> None:
    log = ExecLog([rec(1, 1, [b"cat", b"\xff\xfe name"], "/usr/bin/cat")], {})
    (cmd,) = build_commands(log, WS)
    assert cmd.argv == ("cat", "\\xff\\xfe name")


def test_paths_outside_the_workspace_stay_absolute() -> None:
    assert relative_to(WS, WS) == "."
    assert relative_to(WS + "/a/b", WS) == "./a/b"
    assert relative_to(WS + "-other/a", WS) == WS + "-other/a"
    assert relative_to(None, WS) == "unknown"


def test_capture_modes_on_argv() -> None:
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    argv = ["aws", "--key", key]
    assert apply_mode_argv(argv, "full") == argv
    redacted = apply_mode_argv(argv, "redacted")
    assert redacted[:2] == ["aws", "--key"] and key not in redacted[2]
    assert redacted[2].startswith("<redacted:aws-access-key-id:")
    hashed = apply_mode_argv(argv, "hashed")
    assert all(h.startswith("sha256:") and len(h) == 71 for h in hashed) and len(set(hashed)) == 3
    assert apply_mode("same", "hashed") == apply_mode("same", "hashed")
    line = build_commands(ExecLog([rec(1, 1, [a.encode() for a in argv], "/usr/bin/aws")], {}), WS)[0]
    assert key not in str(line.as_line("hashed")) and key not in str(line.as_line("redacted"))
    assert key in str(line.as_line("full"))
