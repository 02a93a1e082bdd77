"""Report tool calls to assay-runner and ask its tool policy before acting.

Agent code wraps each tool's work::

    channel = Channel.from_env()
    channel.hello("my-agent", "1.0")
    with channel.tool_call("read_file", call_id):   # raises ToolDenied on a policy deny
        data = open(path).read()

Under `assay-runner run`, the runner hands the command one end of a
`SOCK_SEQPACKET` socketpair whose fd number is in `ASSAY_RUNNER_SDK_FD`.
Every message is one JSON packet and waits for the runner's one-packet
reply, so the runner's receipt stamps bracket the tool's real work: that is
what lets it bind kernel events to a tool call. Outside the runner the
variable is absent and the channel is a no-op that allows everything, so the
same agent runs anywhere. Standard library only: this module is imported
into agent processes we do not control. Protocol: docs/sdk.md.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

ENV_FD = "ASSAY_RUNNER_SDK_FD"
MAX_PACKET = 64 * 1024
"""Largest packet either side sends or accepts (a reply is far smaller)."""

Status = Literal["ok", "error", "denied"]

__all__ = ["ENV_FD", "Channel", "ChannelError", "ToolCall", "ToolDenied"]


class ChannelError(RuntimeError):
    """The runner rejected a message or the channel broke.

    Raised rather than ignored: under the runner, a lost message means
    evidence the run claims to have would be missing.
    """


class ToolDenied(Exception):
    """The runner's tool policy denied this call; the tool must not act."""

    def __init__(self, tool: str, tool_call_id: str | None, rule: str) -> None:
        super().__init__(f"tool {tool!r} denied by policy rule {rule!r}")
        self.tool = tool
        self.tool_call_id = tool_call_id
        self.rule = rule


@dataclass(frozen=True)
class ToolCall:
    """The runner's answer to a started tool call (what `tool_call()` yields)."""

    tool: str
    tool_call_id: str | None
    decision: Literal["allow", "deny"]
    rule: str


class Channel:
    """The agent's end of the runner's SDK channel (or a no-op without one).

    One channel per process: `from_env()` returns the same object on every
    call, because two socket objects on one fd would close it under each
    other. Safe to share between threads: a lock keeps each request paired
    with its reply.
    """

    _shared: ClassVar[dict[int, Channel]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, sock: socket.socket | None) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Channel:
        """The channel named by `ASSAY_RUNNER_SDK_FD`, or a no-op channel when unset."""
        raw = (os.environ if environ is None else environ).get(ENV_FD, "")
        if not raw:
            return cls(None)
        try:
            fd = int(raw)
        except ValueError:
            raise ChannelError(f"{ENV_FD}={raw!r} is not an fd number") from None
        with cls._shared_lock:
            if fd not in cls._shared:
                cls._shared[fd] = cls(_adopt(fd))
            return cls._shared[fd]

    def close(self) -> None:
        """Close the channel for good (the runner sees EOF once no process holds it)."""
        if self._sock is None:
            return
        with Channel._shared_lock:
            for fd, channel in list(Channel._shared.items()):
                if channel is self:
                    del Channel._shared[fd]
        with self._lock:
            self._sock.close()

    @property
    def connected(self) -> bool:
        """True under the runner; False for the no-op channel."""
        return self._sock is not None

    def hello(self, sdk_name: str, sdk_version: str) -> None:
        """Name the agent runtime once, before its first tool call."""
        self._request({"event": "sdk_hello", "sdk_name": sdk_name, "sdk_version": sdk_version})

    def started(self, tool: str, tool_call_id: str | None) -> ToolCall:
        """Report a tool call about to act; returns the policy's answer."""
        reply = self._request({"event": "tool_call_started", "tool": tool, "tool_call_id": tool_call_id})
        if reply is None:
            return ToolCall(tool, tool_call_id, "allow", "no_runner")
        decision = reply.get("decision")
        if decision not in ("allow", "deny"):
            raise ChannelError(f"runner replied without a decision for tool {tool!r}: {reply!r}")
        return ToolCall(tool, tool_call_id, decision, str(reply.get("rule", "")))

    def finished(self, tool: str, tool_call_id: str | None, status: Status) -> None:
        """Report that a tool call is over (after its last side effect)."""
        self._request(
            {"event": "tool_call_finished", "tool_call_id": tool_call_id, "tool": tool, "status": status}
        )

    @contextmanager
    def tool_call(self, tool: str, tool_call_id: str | None) -> Iterator[ToolCall]:
        """Bracket a tool's work: started before, finished (`ok`/`error`) after.

        A denied call sends `finished` with status `denied` and raises
        `ToolDenied` before the body runs, so the tool never acts.
        """
        call = self.started(tool, tool_call_id)
        if call.decision == "deny":
            self.finished(tool, tool_call_id, "denied")
            raise ToolDenied(tool, tool_call_id, call.rule)
        try:
            yield call
        except BaseException:
            self.finished(tool, tool_call_id, "error")
            raise
        self.finished(tool, tool_call_id, "ok")

    def _request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Send one packet and block for the reply (None on the no-op channel)."""
        if self._sock is None:
            return None
        if self._sock.fileno() == -1:
            raise ChannelError("the SDK channel is closed")
        packet = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        if len(packet) > MAX_PACKET:
            raise ChannelError(f"{message['event']} message of {len(packet)} bytes exceeds {MAX_PACKET}")
        with self._lock:
            try:
                self._sock.send(packet)
                data = self._sock.recv(MAX_PACKET)
            except OSError as exc:
                raise ChannelError(f"SDK channel to the runner failed: {exc}") from exc
        if not data:
            raise ChannelError("the runner closed the SDK channel")
        try:
            reply = json.loads(data)
        except ValueError:
            raise ChannelError(f"undecodable reply from the runner: {data[:200]!r}") from None
        if not isinstance(reply, dict) or reply.get("ok") is not True:
            error = reply.get("error") if isinstance(reply, dict) else reply
            raise ChannelError(f"runner rejected {message['event']}: {error}")
        return reply


def _adopt(fd: int) -> socket.socket:
    """Wrap the inherited fd, checking it really is the runner's seqpacket socket.

    The fd is made non-inheritable so programs the agent runs do not hold
    the channel open (the runner sees EOF when the agent exits).
    """
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ChannelError(f"{ENV_FD}={fd} is not a usable socket: {exc.strerror}") from None
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET:
        sock.detach()
        raise ChannelError(f"{ENV_FD}={fd} is not an AF_UNIX SOCK_SEQPACKET socket")
    sock.set_inheritable(False)
    return sock
