"""Unix socket paths as addresses: one too long to be an address is a one-line error.

`sockaddr_un.sun_path` holds 108 bytes, NUL included. Python refuses a longer path before
any syscall, with an OSError that has no errno ("AF_UNIX path too long"),
which would reach the user as a traceback from `bind` or `connect`. The
daemon's socket is a path the operator or the caller chose (`socket.path`,
`--socket`, `ASSAY_RUNNER_SOCKET`), so it is checked where it is used; the
probe harness's `probe-op` binds a socket too long for an address by its name
in its directory. Here, below both, so neither imports the other.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.errors import RunnerError

SUN_PATH_MAX = 107
"""The longest pathname a unix socket address holds: `sockaddr_un.sun_path` is 108 bytes, and
Python keeps one for the terminating NUL (the kernel would take 108 without it; Python refuses)."""


def unix_address(path: Path, where: str) -> str:
    """`path` as an address for bind/connect; RunnerError naming `where` it came from when too long."""
    size = len(os.fsencode(path))
    if size > SUN_PATH_MAX:
        raise RunnerError(f"the socket path {path} ({where}) is {size} bytes long, and a unix socket path "
                          f"holds at most {SUN_PATH_MAX}: choose a shorter one")
    return str(path)
