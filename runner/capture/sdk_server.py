"""The runner's end of the SDK channel: stamp, decide, reply, keep.

The agent (through `assay_sdk`) sends one JSON packet per event on an
inherited `SOCK_SEQPACKET` socket and blocks until the reply. A daemon
thread here stamps each packet with `time.monotonic_ns()` (CLOCK_MONOTONIC,
the clock `bpf_ktime_get_ns` uses for kernel events) as soon as it arrives
and BEFORE replying: a `tool_call_started` stamp therefore precedes the
tool's work and a `tool_call_finished` stamp follows it, which is what makes
the correlation windows exact. For `tool_call_started` it asks the tool
policy and puts the answer in the reply.

The thread never writes the spool (the session loop owns it): messages wait
in memory until `take_messages()`. It never blocks the runner either: EOF
(the agent and everything that inherited the fd exited) ends it, and
`stop()` wakes it through a pipe. Protocol: docs/sdk.md.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from assay_sdk import ENV_FD, MAX_PACKET
from spool.format import SdkMessage

ToolDecider = Callable[[str], tuple[str, str]]
"""tool name -> (decision "allow"|"deny", rule): the policy's answer for one call."""

STATUSES = frozenset({"ok", "error", "denied"})
NO_POLICY_RULE = "no_policy"


class MessageError(ValueError):
    """A packet that is not a protocol message; its text goes back to the agent."""


class SdkServer:
    """Serve one run's SDK channel on a background thread.

    Lifecycle: construct, pass `child_fd` to spawn's `keep_fds` and `env()`
    into the command's environment, `start()`, spawn, `close_child_end()`;
    while the command runs, `take_messages()` from the session loop; after
    it exits, `stop()` and one last `take_messages()`.

    `tool_decider=None` means the run has no policy: calls are allowed
    (the agent must not break), but the recorded messages carry no decision,
    so the correlation report says so.
    """

    def __init__(self, tool_decider: ToolDecider | None) -> None:
        self._decide = tool_decider
        self._sock, self._child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._child.set_inheritable(True)
        self.child_fd: int = self._child.fileno()
        self._wake_r, self._wake_w = os.pipe()
        self._lock = threading.Lock()
        self._pending: list[SdkMessage] = []
        self._thread: threading.Thread | None = None
        self.rejected: list[str] = []
        """Why each malformed packet was refused (for the runner's log)."""

    def env(self) -> dict[str, str]:
        """The variable that names the channel to `assay_sdk.Channel.from_env()`."""
        return {ENV_FD: str(self.child_fd)}

    def start(self) -> None:
        """Start serving (before the command starts, so no message waits)."""
        self._thread = threading.Thread(target=self._serve, name="assay-sdk-channel", daemon=True)
        self._thread.start()

    def close_child_end(self) -> None:
        """Drop the runner's copy of the agent's end, so the agent's exit is EOF here."""
        if self._child.fileno() != -1:
            self._child.close()

    def take_messages(self) -> list[SdkMessage]:
        """Messages received since the last call, in receipt order."""
        with self._lock:
            taken, self._pending = self._pending, []
        return taken

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (packets already queued are answered first) and close the socket."""
        self.close_child_end()
        if self._thread is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
            self._thread.join(timeout)
            if self._thread.is_alive():  # pragma: no cover - the loop never blocks this long
                raise RuntimeError("SDK channel thread did not stop")
            self._thread = None
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1
        self._sock.close()

    def _serve(self) -> None:
        """Answer packets until EOF or `stop()`; then answer what is already queued."""
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._wake_r in ready:
                while self._handle_one(block=False):
                    pass
                return
            if not self._handle_one(block=True):
                return

    def _handle_one(self, block: bool) -> bool:
        """Receive, stamp, decide, record, reply for one packet; False at EOF or when none is queued."""
        try:
            data, _anc, flags, _addr = self._sock.recvmsg(MAX_PACKET, 0, 0 if block else socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False
        ts = time.monotonic_ns()
        if not data and not flags & socket.MSG_TRUNC and self._peer_gone():
            return False  # EOF: every holder of the agent's end is gone
        try:
            if flags & socket.MSG_TRUNC:
                raise MessageError(f"message larger than {MAX_PACKET} bytes")
            message = self._message(data, ts)
        except MessageError as exc:
            self.rejected.append(str(exc))
            self._reply({"ok": False, "error": str(exc)})
            return True
        with self._lock:
            self._pending.append(message)
        reply: dict[str, Any] = {"ok": True}
        if message.event == "tool_call_started":
            reply["decision"] = message.decision or "allow"
            reply["rule"] = message.rule or NO_POLICY_RULE
        self._reply(reply)
        return True

    def _peer_gone(self) -> bool:
        """Tell EOF from an empty packet (both read as b"" on a seqpacket socket)."""
        return any(ev & select.POLLHUP for _, ev in _poll_once(self._sock))

    def _message(self, data: bytes, ts: int) -> SdkMessage:
        """Validate one packet into a stamped SdkMessage (decision included)."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MessageError(f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise MessageError("a message is a JSON object")
        event = obj.get("event")
        if event == "sdk_hello":
            return SdkMessage(
                ts=ts, event=event, sdk_name=_text(obj, "sdk_name"), sdk_version=_text(obj, "sdk_version")
            )
        if event not in ("tool_call_started", "tool_call_finished"):
            raise MessageError(f"unknown event {event!r}")
        tool = _text(obj, "tool")
        call_id = obj.get("tool_call_id")
        if call_id is not None and (not isinstance(call_id, str) or not call_id):
            raise MessageError("tool_call_id must be a non-empty string or null")
        if event == "tool_call_finished":
            status = obj.get("status")
            if status not in STATUSES:
                raise MessageError(f"status must be one of {sorted(STATUSES)}, got {status!r}")
            return SdkMessage(ts=ts, event=event, tool=tool, tool_call_id=call_id, status=status)
        decision, rule = self._decision(tool)
        return SdkMessage(ts=ts, event=event, tool=tool, tool_call_id=call_id, decision=decision, rule=rule)

    def _decision(self, tool: str) -> tuple[str | None, str | None]:
        """The policy's answer; a decider failure denies (fail closed) rather than kill the thread."""
        if self._decide is None:
            return None, None
        try:
            decision, rule = self._decide(tool)
        except Exception as exc:
            self.rejected.append(f"tool policy failed for {tool!r}: {exc}")
            return "deny", "policy_error"
        if decision not in ("allow", "deny"):
            self.rejected.append(f"tool policy gave {decision!r} for {tool!r}")
            return "deny", "policy_error"
        return decision, rule

    def _reply(self, reply: dict[str, Any]) -> None:
        """Answer without ever blocking: a dead agent, or one that never reads, gets nothing."""
        with contextlib.suppress(OSError):
            self._sock.send(orjson.dumps(reply), socket.MSG_DONTWAIT)


def _poll_once(sock: socket.socket) -> list[tuple[int, int]]:
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return poller.poll(0)


def _text(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise MessageError(f"{key} must be a non-empty string")
    return value
