"""The daemon's wire protocol and operator config, fed hostile and broken input (no root needed)."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import msgspec
import pytest

from runner.daemon import protocol
from runner.daemon.config import load_config
from runner.errors import RunnerError
from tests.support import assay


def _run(**changes: object) -> protocol.RunStart:
    base = protocol.RunStart(version=protocol.VERSION, run_id="r1", exe=b"/bin/true", argv=[b"true"],
                             env={b"PATH": b"/bin"}, workdir=b"/tmp", out_display="out", ringbuf_pages=64)
    return msgspec.structs.replace(base, **changes)


def _body(msg: protocol.RunStart) -> bytes:
    return protocol.encode(msg)[4:]


def test_a_run_request_round_trips_with_any_bytes_in_names() -> None:
    msg = _run(argv=[b"x", b"\xff\xfe caf\xc3\xa9 \x1b[31m"], env={b"A\xff": b"\x01\x02"})
    assert protocol.decode_client(_body(msg)) == msg
    assert os.fsencode(os.fsdecode(b"\xff\xfe")) == b"\xff\xfe"


@pytest.mark.parametrize(("change", "problem"), [
    ({"version": 99}, "protocol version 99 is not supported"),
    ({"argv": []}, "argv must have 1 to"),
    ({"argv": [b"a\0b"]}, "cannot contain NUL bytes"),
    ({"env": {b"A=B": b"c"}}, "contain no '='"),
    ({"env": {b"X": b"y" * protocol.MAX_ARG_BYTES}}, "more than"),
    ({"exe": b"true"}, "must be absolute paths"),
])
def test_bad_run_requests_get_one_clear_line(change: dict, problem: str) -> None:
    with pytest.raises(protocol.ProtocolError, match=problem):
        protocol.decode_client(_body(_run(**change)))


@pytest.mark.parametrize("body", [b"", b"\xc1", b"\x93\x01\x02\x03", msgspec.msgpack.encode({"type": "nope"}),
                                  msgspec.msgpack.encode({"type": "status", "version": 1, "extra": 1}),
                                  msgspec.msgpack.encode({"type": "status", "version": "1"})])
def test_garbage_is_a_protocol_error_not_a_crash(body: bytes) -> None:
    with pytest.raises(protocol.ProtocolError, match="bad request"):
        protocol.decode_client(body)


def test_frames_are_bounded_before_they_are_read() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", protocol.MAX_FRAME + 1) + b"x")
        reader = protocol.FrameReader()
        with pytest.raises(protocol.ProtocolError, match="frame larger than"):
            reader.feed(b)


def test_frames_reassemble_and_fds_are_counted_and_closed() -> None:
    a, b = socket.socketpair()
    with a, b:
        r, w = os.pipe()
        data = protocol.encode(protocol.StatusQuery(version=1))
        a.sendmsg([data[:3]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("ii", r, w))])
        a.sendall(data[3:])
        reader = protocol.FrameReader(max_fds=5)
        body = protocol.receive(b, reader)
        assert body is not None  # a whole frame came
        assert protocol.decode_client(body) == protocol.StatusQuery(version=1)
        fds = reader.take_fds()
        assert len(fds) == 2 and all(os.fstat(fd) for fd in fds)
        for fd in (r, w, *fds):
            os.close(fd)
        one, two = os.pipe()
        a.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("ii", one, two))])
        with pytest.raises(protocol.ProtocolError, match="too many file descriptors"):
            protocol.FrameReader(max_fds=1).feed(b)
        os.close(one)
        os.close(two)


def test_config_errors_are_located(tmp_path: Path) -> None:
    path = tmp_path / "daemon.toml"
    cases = [
        ("version = 1\n[limits]\nmax_concurrent_runs = 0\n",
         "daemon.toml:3: field limits.max_concurrent_runs: expected 1 to 63"),
        ("version = 1\n[limits]\nmax_concurrent_runs = 64\n",
         "daemon.toml:3: field limits.max_concurrent_runs: expected 1 to 63"),
        ("[sensor]\nringbuf_pages = 3000\n",
         "daemon.toml:2: field sensor.ringbuf_pages: expected a power of two up to 16384"),
        ("[limits]\nmemory_max = \"4 GB\"\n",
         "daemon.toml:2: field limits.memory_max: expected a positive byte"),
        ("[access]\nallowed_groups = [\"root\", \"no-such-group-xyz\"]\n",
         "daemon.toml:2: field access.allowed_groups[1]: no group 'no-such-group-xyz'"),
        ("[socket]\npath = \"relative.sock\"\n",
         "daemon.toml:2: field socket.path: expected an absolute path"),
        ("[limit]\n", "daemon.toml:1: field limit: unknown key (expected one of: version, socket, access"),
        ("[floor]\npolicy = \"/nonexistent/floor.toml\"\nworkspace_roots = [\"/srv/*\"]\n",
         "cannot read policy file /nonexistent/floor.toml"),
        ("version = \n", "daemon.toml:1: invalid TOML"),
        ("[floor]\npolicy = \"/etc/floor.toml\"\n",
         "field floor.workspace_roots: a floor policy needs the directories callers may run in"),
        ("[floor]\nworkspace_roots = [\"/srv/*\", \"/home/*/../x\"]\n",
         "daemon.toml:2: field floor.workspace_roots[1]: expected an absolute, normalized glob"),
        ("[limits]\nmax_runs_per_user = 0\n",
         "daemon.toml:2: field limits.max_runs_per_user: expected at least 1"),
        ("[limits]\nrequest_timeout_s = 0.1\n",
         "daemon.toml:2: field limits.request_timeout_s: expected 0.5 to 60 seconds"),
        ("[metrics]\nsocket = \"metrics.sock\"\n",
         "daemon.toml:2: field metrics.socket: expected an absolute path"),
        ("[limits]\nmax_connections_per_user = 65\n",
         "daemon.toml:2: field limits.max_connections_per_user: expected 1 to 64"),
    ]
    for text, expected in cases:
        path.write_text(text)
        with pytest.raises(RunnerError) as info:
            load_config(path)
        assert expected in str(info.value) and "\n" not in str(info.value)


def test_config_values(tmp_path: Path) -> None:
    path = tmp_path / "daemon.toml"
    floor = tmp_path / "floor.toml"
    floor.write_text('version = 1\n[filesystem]\nread = ["/"]\nwrite = ["$WORKSPACE"]\n')
    path.write_text(f'[access]\nallowed_groups = ["root"]\n[limits]\npids_max = 100\nmemory_max = "2G"\n'
                    f'[floor]\npolicy = "{floor}"\nworkspace_roots = ["/home/*/work"]\n')
    config = load_config(path)
    assert (config.max_runs_per_user, config.max_connections_per_user) == (4, 8)  # half of 8 runs; default
    assert config.workspace_roots == ("/home/*/work",)
    assert config.allowed_gids == frozenset({0})
    assert (config.limits.pids_max, config.limits.memory_max) == (100, 2 << 30)
    assert config.floor is not None and config.floor.name == "floor"


def test_the_default_limits_are_direct_modes_pids_and_a_memory_cap(tmp_path: Path) -> None:
    from runner.capture.limits import DEFAULT_LIMITS

    limits = load_config(None).limits
    assert (limits.pids_max, limits.memory_max, limits.required) == (DEFAULT_LIMITS.pids_max, 4 << 30, False)
    path = tmp_path / "daemon.toml"
    path.write_text('[limits]\npids_max = "max"\nmemory_max = "max"\n[sensor]\ntasks_max = 4096\n')
    config = load_config(path)
    assert (config.limits.pids_max, config.limits.memory_max, config.limits.required) == (None, None, True)
    assert (config.monitor.tasks_max, config.monitor.tasks_per_run) == (4096, 4096 // 8)


def test_a_socket_path_too_long_for_a_unix_address_is_one_clear_line(tmp_path: Path) -> None:
    """Not a traceback from bind/connect (Python's OSError without an errno): what to do, exit 125."""
    import dataclasses

    from runner.daemon.address import listen

    long = tmp_path / ("d" * 110) / "runner.sock"
    expected = (f"the socket path {long} (%s) is {len(str(long))} bytes long, and a unix socket path "
                "holds at most 107: choose a shorter one")
    argvs: list[list[str | Path]] = [["daemon", "status", "--socket", long],
                                     ["run", "--daemon", "--socket", long, "--", "true"]]
    for argv in argvs:
        done = assay(*argv)
        assert (done.returncode, done.stderr) == (125, "assay-runner: error: "
                                                  + expected % "--socket or $ASSAY_RUNNER_SOCKET" + "\n")
    with pytest.raises(RunnerError) as refused:
        listen(dataclasses.replace(load_config(None), socket_path=long))
    assert str(refused.value) == expected % "socket.path or --socket"
    assert not long.parent.exists()  # refused before anything is made



@pytest.mark.parametrize(("path", "root", "under"), [
    ("/home/alice/work", "/home/*/work", True), ("/home/alice/work/a/b", "/home/*/work", True),
    ("/home/alice", "/home/*/work", False), ("/home/a/b/work", "/home/*/work", False),
    ("/", "/home/*/work", False), ("/home/alice/workshop", "/home/*/work", False),
    ("/srv/ci/job-1", "/srv/ci/*", True), ("/srv/ci", "/srv/ci/*", False)])
def test_a_workspace_root_glob_matches_whole_components(path: str, root: str, under: bool) -> None:
    from runner.daemon.workspace import matches_root

    assert matches_root(path, root) is under
