"""The SDK channel end to end, without a kernel: `assay_sdk` against `SdkServer`.

A real seqpacket socketpair and the server's real thread; the test process
plays the agent. These pin the protocol (docs/sdk.md): one reply per
message, stamps taken before the reply, decisions from the tool policy,
malformed packets refused without stopping the server, EOF ends it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import orjson
import pytest

from assay_sdk import ENV_FD, MAX_PACKET, Channel, ChannelError, ToolDenied
from runner.capture.sdk_server import SdkServer


def deny_shell(tool: str) -> tuple[str, str]:
    return ("deny", "tools.deny") if tool == "shell" else ("allow", "tools.default")


@pytest.fixture
def server() -> Iterator[SdkServer]:
    srv = SdkServer(deny_shell)
    srv.start()
    yield srv
    srv.stop()


def agent_end(srv: SdkServer) -> int:
    """What spawn does: the agent gets its own copy of the fd, the runner drops its one."""
    fd = os.dup(srv.child_fd)
    srv.close_child_end()
    return fd


@pytest.fixture
def channel(server: SdkServer) -> Iterator[Channel]:
    ch = Channel.from_env({ENV_FD: str(agent_end(server))})
    yield ch
    ch.close()


def raw_request(sock: socket.socket, packet: bytes) -> dict:
    sock.send(packet)
    return orjson.loads(sock.recv(MAX_PACKET))


def test_env_names_the_inheritable_child_fd(server: SdkServer) -> None:
    assert server.env() == {ENV_FD: str(server.child_fd)}
    assert os.get_inheritable(server.child_fd)


def test_allowed_call_is_stamped_decided_and_finished(server: SdkServer, channel: Channel) -> None:
    channel.hello("agents-x", "1.2.3")
    before = time.monotonic_ns()
    with channel.tool_call("read_file", "tc_1") as call:
        inside = time.monotonic_ns()
    after = time.monotonic_ns()
    assert (call.decision, call.rule) == ("allow", "tools.default")

    hello, started, finished = server.take_messages()
    assert (hello.event, hello.sdk_name, hello.sdk_version) == ("sdk_hello", "agents-x", "1.2.3")
    assert (started.event, started.tool, started.tool_call_id) == ("tool_call_started", "read_file", "tc_1")
    assert (started.decision, started.rule) == ("allow", "tools.default")
    assert (finished.event, finished.tool_call_id, finished.status) == ("tool_call_finished", "tc_1", "ok")
    # Stamped on receipt, before the reply released the agent: the window brackets the body.
    assert before <= started.ts <= inside <= finished.ts <= after
    assert server.take_messages() == []


def test_denied_call_never_runs_and_reports_denied(server: SdkServer, channel: Channel) -> None:
    ran = []
    with pytest.raises(ToolDenied) as denied, channel.tool_call("shell", "tc_2"):
        ran.append(True)
    assert not ran
    exc = denied.value
    assert (exc.tool, exc.tool_call_id, exc.rule) == ("shell", "tc_2", "tools.deny")
    started, finished = server.take_messages()
    assert (started.decision, started.rule) == ("deny", "tools.deny")
    assert (finished.tool, finished.status) == ("shell", "denied")


def test_failing_body_reports_error_and_propagates(server: SdkServer, channel: Channel) -> None:
    with pytest.raises(PermissionError), channel.tool_call("write_file", None):
        raise PermissionError(13, "Permission denied")
    started, finished = server.take_messages()
    assert started.tool_call_id is None and finished.tool_call_id is None
    assert finished.status == "error"


@pytest.mark.parametrize(
    ("packet", "error"),
    [
        (b"not json", "not JSON"),
        (b"", "not JSON"),
        (b"[1]", "a message is a JSON object"),
        (b'{"event":"tool_call_exploded","tool":"x"}', "unknown event"),
        (b'{"event":"sdk_hello","sdk_name":"x"}', "sdk_version must be a non-empty string"),
        (b'{"event":"tool_call_started","tool_call_id":"a"}', "tool must be a non-empty string"),
        (b'{"event":"tool_call_started","tool":"t","tool_call_id":7}', "tool_call_id must be"),
        (b'{"event":"tool_call_started","tool":"t","tool_call_id":""}', "tool_call_id must be"),
        (b'{"event":"tool_call_finished","tool":"t","tool_call_id":"a","status":"meh"}', "status must be"),
        (b"{" + b" " * MAX_PACKET + b"}", f"larger than {MAX_PACKET}"),
    ],
)
def test_malformed_message_is_refused_and_the_server_keeps_serving(
    server: SdkServer, packet: bytes, error: str
) -> None:
    with socket.socket(fileno=agent_end(server)) as sock:
        reply = raw_request(sock, packet)
        assert reply["ok"] is False and error in reply["error"]
        ok = raw_request(sock, b'{"event":"tool_call_started","tool":"shell","tool_call_id":"tc_9"}')
        assert ok == {"ok": True, "decision": "deny", "rule": "tools.deny"}
    assert [m.tool_call_id for m in server.take_messages()] == ["tc_9"]
    assert len(server.rejected) == 1 and error in server.rejected[0]


def test_agent_exit_is_eof_and_ends_the_thread_by_itself(server: SdkServer) -> None:
    with socket.socket(fileno=agent_end(server)) as sock:
        raw_request(sock, b'{"event":"sdk_hello","sdk_name":"a","sdk_version":"1"}')
    thread = server._thread
    assert thread is not None
    thread.join(5)
    assert not thread.is_alive()
    assert [m.event for m in server.take_messages()] == ["sdk_hello"]


def test_messages_queued_at_stop_are_still_answered_and_kept() -> None:
    srv = SdkServer(deny_shell)
    with socket.socket(fileno=agent_end(srv)) as sock:
        sock.send(b'{"event":"tool_call_started","tool":"read_file","tool_call_id":"tc_1"}')
        srv.start()
        srv.stop()
        assert orjson.loads(sock.recv(MAX_PACKET))["decision"] == "allow"
    assert [m.tool_call_id for m in srv.take_messages()] == ["tc_1"]


def test_agent_that_never_reads_replies_cannot_block_the_server(server: SdkServer) -> None:
    """Replies that do not fit the agent's queue are dropped; a blocking send would hang here."""
    hello = b'{"event":"sdk_hello","sdk_name":"a","sdk_version":"1"}'
    with socket.socket(fileno=agent_end(server)) as sock:
        sock.settimeout(10)
        for _ in range(2000):
            sock.send(hello)
        server.stop()
    assert len(server.take_messages()) == 2000


def test_concurrent_threads_each_get_their_own_answer(server: SdkServer, channel: Channel) -> None:
    answers: dict[str, str] = {}

    def call(i: int) -> None:
        tool = "shell" if i % 2 else "read_file"
        try:
            with channel.tool_call(tool, f"tc_{i:03}") as c:
                answers[c.tool_call_id or ""] = c.decision
        except ToolDenied as exc:
            answers[exc.tool_call_id or ""] = "deny"

    threads = [threading.Thread(target=call, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {f"tc_{i:03}": "deny" if i % 2 else "allow" for i in range(40)}
    messages = server.take_messages()
    assert len(messages) == 80
    assert [m.ts for m in messages] == sorted(m.ts for m in messages)


def test_without_a_policy_calls_are_allowed_but_carry_no_decision() -> None:
    srv = SdkServer(None)
    srv.start()
    try:
        with socket.socket(fileno=agent_end(srv)) as sock:
            reply = raw_request(sock, b'{"event":"tool_call_started","tool":"shell","tool_call_id":"a"}')
        assert reply == {"ok": True, "decision": "allow", "rule": "no_policy"}
        (message,) = srv.take_messages()
        assert message.decision is None and message.rule is None
    finally:
        srv.stop()


def test_a_failing_policy_denies_instead_of_killing_the_channel() -> None:
    def broken(tool: str) -> tuple[str, str]:
        raise KeyError(tool)

    srv = SdkServer(broken)
    srv.start()
    try:
        with socket.socket(fileno=agent_end(srv)) as sock:
            reply = raw_request(sock, b'{"event":"tool_call_started","tool":"x","tool_call_id":"a"}')
        assert reply == {"ok": True, "decision": "deny", "rule": "policy_error"}
        assert "tool policy failed" in srv.rejected[0]
    finally:
        srv.stop()


def test_runner_gone_is_an_error_for_the_agent(server: SdkServer, channel: Channel) -> None:
    server.stop()
    with pytest.raises(ChannelError):
        channel.hello("a", "1")


def test_from_env_is_one_channel_per_fd(server: SdkServer) -> None:
    env = {ENV_FD: str(agent_end(server))}
    first = Channel.from_env(env)
    try:
        assert Channel.from_env(env) is first
        assert not os.get_inheritable(int(env[ENV_FD]))  # programs the agent runs do not hold it
    finally:
        first.close()
    with pytest.raises(ChannelError, match="closed"):
        first.hello("a", "1")


def test_without_the_variable_the_channel_is_a_no_op_that_allows() -> None:
    channel = Channel.from_env({})
    assert not channel.connected
    channel.hello("a", "1")
    with channel.tool_call("shell", None) as call:
        pass
    assert (call.decision, call.rule) == ("allow", "no_runner")
    assert not Channel.from_env({ENV_FD: ""}).connected


def test_a_bad_variable_is_a_clear_error() -> None:
    with pytest.raises(ChannelError, match="not an fd number"):
        Channel.from_env({ENV_FD: "three"})
    r, w = os.pipe()
    try:
        with pytest.raises(ChannelError, match="not a usable socket"):
            Channel.from_env({ENV_FD: str(r)})
    finally:
        os.close(r)
        os.close(w)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        fd = tcp.fileno()
        with pytest.raises(ChannelError, match="SOCK_SEQPACKET"):
            Channel.from_env({ENV_FD: str(fd)})
        assert tcp.fileno() == fd  # the check did not close what it does not own
