"""Stage 5: drop telemetry that is not an agent capability claim.

The contract's filter table ("Telemetry Versus Evidence") applied to open
events. Exec and network events are always evidence, and so are policy
denials (`file_blocked` on a loader path is kept: the decision is the claim).
"Python bootstrap probes" is not spelled out by the contract; we read it as
the interpreter's own start-up lookups: its standard library and
site-packages (`*/lib/python3*/...`, `*/lib/python3*.zip`), `pyvenv.cfg`
and `pybuilddir.txt` (docs/artifacts.md).
"""

from __future__ import annotations

import re
from functools import lru_cache

from normalizer.classify import Classified

_TELEMETRY = re.compile(
    r"""^(?:
        /etc/ld\.so\.(?:cache|preload)$              # dynamic loader
      | /(?:lib|lib32|lib64|usr/lib)/                # loader and runtime libraries
      | /usr/share/locale(?:-langpack)?/             # locale
      | /etc/localtime$
      | /etc/ssl/openssl\.cnf$                      # upstream's list (kernel/decode.rs:170-192)
      | /(?:proc|sys|dev)(?:/|$)                     # kernel and device introspection
      | .*/lib/python3[^/]*(?:/|\.zip$)              # Python bootstrap: stdlib, site-packages
      | .*/(?:pyvenv\.cfg|pybuilddir\.txt|[^/]*\._pth)$  # Python bootstrap probes
      | (?=.*/\.rustup/toolchains/).*(?:\.so$|\.so\.)  # Rust toolchain loader paths
      | (?=.*/target/)(?=.*/(?:build|debug|release)/).*(?:\.so$|\.so\.)
      | (?:.*/)?node_modules(?:/|$)                  # runtime dependency trees
    )""",
    re.VERBOSE,
)


TELEMETRY_PREFIXES = ("/etc/", "/lib", "/usr/lib/", "/usr/share/locale", "/proc", "/sys", "/dev")
"""A prefix that every match of an anchored alternative of `_TELEMETRY` starts with."""
TELEMETRY_SUBSTRINGS = ("/lib/python3", "node_modules", "pyvenv.cfg", "pybuilddir.txt", "._pth",
                        "/.rustup/toolchains/", "/target/")
"""A substring that every match of an unanchored alternative holds."""


def could_be_telemetry(path: str) -> bool:
    """False only when `_TELEMETRY` cannot match `path`: every alternative needs one of the
    prefixes or substrings above, and most paths hold none (a few substring tests cost less than
    the regex, whose unanchored alternatives scan the whole path; tests/test_normspeed.py)."""
    return path.startswith(TELEMETRY_PREFIXES) or any(s in path for s in TELEMETRY_SUBSTRINGS)


def is_telemetry_path(path: str) -> bool:
    """True for a path whose successful opens the contract classes as telemetry."""
    return could_be_telemetry(path) and _matches(path)


@lru_cache(maxsize=4096)
def _matches(path: str) -> bool:
    return bool(_TELEMETRY.match(path))


def is_telemetry(event: Classified) -> bool:
    """True for an open whose path the contract classes as telemetry."""
    return event.kind == "openat" and event.value is not None and is_telemetry_path(event.value)
