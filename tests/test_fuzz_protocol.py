"""Property-based fuzzing of the daemon's request decoder (runner/daemon/protocol.py).

A peer is hostile: whatever bytes it sends, the daemon gets a message that
passed every check, or a ProtocolError whose one line it sends back as
`Refused`. Anything else escaping would end the daemon's request handling.
"""

from __future__ import annotations

import socket

import msgspec
from hypothesis import event, example, given
from hypothesis import strategies as st

from runner.daemon import protocol

SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
           | st.binary(max_size=20))
ANY = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                   | st.dictionaries(st.text(max_size=8) | st.binary(max_size=8), inner, max_size=4),
                   max_leaves=12)
PATHS = st.binary(max_size=30) | st.just(b"/tmp") | st.just(b"/bin/true")

RUN_FIELDS = {
    "type": st.sampled_from(["run", "status", "interrupt", "started", "bogus"]) | SCALARS,
    "version": st.sampled_from([protocol.VERSION, 0, 2, -1, 1 << 70]) | SCALARS,
    "run_id": st.sampled_from(["r1", "a.b", "r\n", ""]) | st.text(max_size=140) | SCALARS,
    "exe": PATHS | SCALARS,
    "argv": st.lists(st.binary(max_size=20), max_size=5) | ANY,
    "env": st.dictionaries(st.binary(max_size=8), st.binary(max_size=8), max_size=4) | ANY,
    "workdir": PATHS | SCALARS,
    "out_display": st.text(max_size=20) | SCALARS,
    "ringbuf_pages": st.integers(-5, 1 << 40) | SCALARS,
    "isolate_net": st.booleans() | SCALARS,
    "user": st.none() | st.integers(-1, 1 << 33) | SCALARS,
    "policy": st.none() | ANY,
    "status_line": st.booleans() | SCALARS,
    "umask": st.integers(-1, 0o7777) | SCALARS,
    "rlimits": st.lists(st.tuples(st.integers(-2, 20), st.integers(-3, 1 << 64), st.integers(-3, 1 << 64)),
                        max_size=20) | ANY,
    "junk": ANY,
}
REQUESTS = st.fixed_dictionaries({}, optional=RUN_FIELDS)
VALID_RUN = {"type": "run", "version": protocol.VERSION, "run_id": "r1", "exe": b"/bin/true",
             "argv": [b"true"], "env": {b"PATH": b"/bin"}, "workdir": b"/tmp", "out_display": "out",
             "ringbuf_pages": 64}


def _encode_and_decode(request: dict) -> None:
    try:
        body = msgspec.msgpack.encode(request)
    except (TypeError, OverflowError):  # not encodable at all: nothing a peer could send
        return
    _decode(body)


def _decode(body: bytes) -> None:
    try:
        msg = protocol.decode_client(body)
    except protocol.ProtocolError as exc:
        assert str(exc) and "\n" not in str(exc)
        event("refused")
        return
    event(f"decoded {type(msg).__name__}")
    assert isinstance(msg, protocol.RunStart | protocol.Interrupt | protocol.StatusQuery)
    if isinstance(msg, protocol.RunStart):
        assert protocol.decode_client(protocol.encode(msg)[4:]) == msg


@given(request=REQUESTS)
@example(request={"type": "status", "version": 1, "junk": "x"})
def test_any_request_shape_is_decoded_or_refused(request: dict) -> None:
    _encode_and_decode(request)


@given(changes=REQUESTS)
@example(changes={"rlimits": [(0, -2, 5)]})
@example(changes={"type": "\n"})  # msgspec quotes the bad value: the one-line refusal had a newline
def test_a_valid_run_request_with_any_fields_changed_is_decoded_or_refused(changes: dict) -> None:
    """Close to a real request, so the checks past the types (_check_run) are reached."""
    _encode_and_decode({**VALID_RUN, **changes})


@given(body=st.binary(max_size=300))
@example(body=b"\x81\xa4type\xa6stat\x80s")  # a str that is not UTF-8: UnicodeDecodeError escaped
def test_any_bytes_are_decoded_or_refused(body: bytes) -> None:
    _decode(body)


@given(stream=st.binary(max_size=200), cut=st.integers(1, 64))
@example(stream=b"\xff\xff\xff\xff", cut=4)
def test_the_frame_reader_gives_frames_or_refuses(stream: bytes, cut: int) -> None:
    """Any byte stream, in any pieces: whole frames (decoded or refused), a clean end, or ProtocolError."""
    a, b = socket.socketpair()
    reader = protocol.FrameReader()
    try:
        for start in range(0, len(stream), cut):
            a.sendall(stream[start:start + cut])
        a.shutdown(socket.SHUT_WR)
        while (body := protocol.receive(b, reader)) is not None:
            _decode(body)
    except protocol.ProtocolError as exc:
        assert str(exc) and "\n" not in str(exc)
    finally:
        reader.close()
        a.close()
        b.close()
