"""Two tool calls on the SDK channel: one without a tool_call_id, one with.

The call without an id cannot be bound to a window (correlation `partial`,
ambiguity `tool_call_without_id:read_file`); the one with an id still is.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout's assay_sdk

from assay_sdk import Channel

channel = Channel.from_env()
channel.hello("assay-test", "1")
with channel.tool_call("read_file", None):
    Path("/etc/hostname").read_bytes()
with channel.tool_call("read_file", "tc_with_id"):
    Path("/etc/hosts").read_bytes()
