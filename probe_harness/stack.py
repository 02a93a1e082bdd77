"""`detect-stack`: the sandbox/OS fingerprint a record's `stack` carries.

`sandbox_mode` comes from `FENCE_SANDBOX_MODE`, which probe-exec sets to the
runner preset a probe runs under (empty, hence null, in baseline and under an
external wrapper, whose policy the harness does not assume). `os` is what
`uname -srm` prints.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")
SANDBOX_ENV = "FENCE_SANDBOX_MODE"


class StackError(ValueError):
    """FENCE_SANDBOX_MODE holds something that is not a sandbox mode."""


def detect_stack(env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """`{"sandbox_mode", "os"}` for this process."""
    env = os.environ if env is None else env
    mode = env.get(SANDBOX_ENV) or None
    if mode is not None and mode not in SANDBOX_MODES:
        raise StackError(
            f"{SANDBOX_ENV}={mode!r} is not a sandbox mode "
            f"(expected one of: {', '.join(SANDBOX_MODES)}, or empty)"
        )
    u = os.uname()
    return {"sandbox_mode": mode, "os": f"{u.sysname} {u.release} {u.machine}"}


def main() -> int:
    """Console script: print the stack object as one JSON line."""
    try:
        print(json.dumps(detect_stack()))
    except StackError as exc:
        print(f"detect-stack: error: {exc}", file=sys.stderr)
        return 1
    return 0
