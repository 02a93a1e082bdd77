"""Stage 5: drop telemetry that is not an agent capability claim.

The contract's filter table ("Telemetry Versus Evidence") applied to the
reads it was written for: loader and runtime lookups. Only a read is ever
folded away, and only by its canonical path (procfs links already followed,
normalizer/reopen.py). An open that writes, creates or truncates is evidence
whatever its path; where Assay would refuse an `openat` line of that path
(its loader filter, `assay_filters`) it is an `event_83` line instead. A read
of another process's memory, environment, command line or mapped files through /proc,
through a /proc link that could not be followed, or of a table path the run itself
made name another file (`ln -s ~/.ssh/id_rsa /dev/shm/k; cat /dev/shm/k`) is an
`event_84` line. Exec
and network events are always evidence, and so are policy denials
(`file_blocked` on a loader path is kept: the decision is the claim).
"Python bootstrap probes" is not spelled out by the contract; we read it as
the interpreter's own start-up lookups: its standard library and
site-packages (`*/lib/python3*/...`, `*/lib/python3*.zip`), `pyvenv.cfg`
and `pybuilddir.txt` (docs/artifacts.md).
"""

from __future__ import annotations

import re
from functools import lru_cache

from normalizer.reopen import ALIAS_PREFIXES

OPENAT = 1
RUNTIME_WRITE = 83
"""An open that writes, creates or truncates a path Assay filters out of `openat` lines."""
PROC_READ = 84
"""A read that must not fold: another process's secrets through /proc, a /proc link not followed,
or a table path the run made name another file (a symlink, hard link or rename there)."""
O_CREAT, O_TRUNC, O_TMPFILE_BIT = 0o100, 0o1000, 0o20000000
CHANGE_BITS = 0o3 | O_CREAT | O_TRUNC | O_TMPFILE_BIT
"""An open with any of these may change the file: write access (1, 2, 3), create, truncate."""

_PROC_READ = re.compile(
    r"""^/(?:
        proc/[0-9]+(?:/task/[0-9]+)?/(?:environ|mem|maps|smaps|smaps_rollup|numa_maps|pagemap|cmdline|auxv)$
      | proc/[0-9]+(?:/task/[0-9]+)?/map_files/[^/]+$                   # a file it maps (root)
      | proc/[^/]+(?:/task/[0-9]+)?/(?:root|cwd|fd/[0-9]+)(?:/|$)   # a link kept as written
      | dev/(?:fd/[0-9]+|stdin|stdout|stderr)(?:/|$)
    )""",
    re.VERBOSE,
)
"""After the walk a number left in /proc/<pid> is another process (the opener's is `self`)."""

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


def assay_filters(path: str) -> bool:
    """Assay's loader filter (kernel/decode.rs:170-196): it refuses an `openat` line of `path`.
    Every such path is also a `could_be_telemetry` one (the C fast path leaves those to Python)."""
    so = path.endswith(".so") or ".so." in path
    return (
        path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/ssl/openssl.cnf", "/usr/pyvenv.cfg",
                 "/usr/bin/pyvenv.cfg", "/usr/bin/python3._pth", "/usr/bin/python3.12._pth",
                 "/usr/bin/pybuilddir.txt")
        or path.startswith(("/lib/", "/lib32/", "/lib64/", "/usr/lib/", "/usr/share/locale/",
                            "/proc/", "/sys/", "/dev/"))
        or "/node_modules/" in path
        or ("/.rustup/toolchains/" in path and so)
        or ("/target/" in path and any(d in path for d in ("/build/", "/debug/", "/release/")) and so)
    )


def open_event_type(path: str | None, flags: int, aliased: bool = False) -> int:
    """The line an open of canonical `path` with `flags` is: `openat` (1), 83 or 84 (see above);
    `aliased`: the path is at or under a link the run made in the table (paths.PathResolver)."""
    if path is None:
        return OPENAT
    if flags & CHANGE_BITS:
        return RUNTIME_WRITE if assay_filters(path) else OPENAT
    if aliased and is_telemetry_path(path):
        return PROC_READ
    return PROC_READ if path.startswith(ALIAS_PREFIXES) and _PROC_READ.match(path) else OPENAT
