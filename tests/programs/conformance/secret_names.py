"""An agent whose paths, endpoints and tool names hold secret-shaped strings.

The strings are fakes in the shapes of Assay's secret rules (an AWS access
key id, a GitHub token, a JWT, a bearer header), built from pieces so this
file does not itself look like a leak. Run it from a scratch directory: it
creates one file per secret, connects to a unix socket path and an abstract
one that hold secrets (nothing listens: the attempt is the evidence), and
reports two tool calls whose names and ids hold secrets over the SDK channel.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout's assay_sdk

from assay_sdk import Channel

SECRETS = {
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "github": "ghp" + "_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "jwt": "eyJ" + "hbGciOiJIUzI1NiJ9" + ".eyJ" + "zdWIiOiIxMjM0NTY3ODkwIn0"
           + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "bearer": "Bearer " + "abcdefghijklmnopqrstuvwxyz012345",
}


def main() -> int:
    for name, secret in SECRETS.items():
        Path(f"{name}-{secret}.txt").write_text("x\n")
    for address in (f"sock-{SECRETS['github']}", "\0" + SECRETS["jwt"]):  # relative: fits sun_path
        with socket.socket(socket.AF_UNIX) as s, contextlib.suppress(OSError):
            s.connect(address)
    channel = Channel.from_env()
    channel.hello("secret-agent", "1")
    with channel.tool_call(f"deploy-{SECRETS['github']}", f"tc-{SECRETS['aws']}"):
        pass
    with channel.tool_call(f"auth {SECRETS['bearer']}", "tc_2"):
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
