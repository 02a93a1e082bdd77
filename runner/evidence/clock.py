"""The clock inputs `determinism` pins: one value for every run, so a job that asks the environment
for "now" (a git commit, a reproducible build) gets the same answer each time.

Only variables the tools read are set: the runner cannot stop a program from
reading the system clock, and a job that still writes the time into a file it
keeps fails the gate, named by the workdir end state (docs/determinism.md).
A variable the caller set already is kept as given (it is the same in every
run too) and reported as such.
"""

from __future__ import annotations

PINNED_EPOCH = 946684800
"""2000-01-01T00:00:00Z: later than every tool's lower bound (zip's 1980), obviously not a real time."""

CLOCK_ENV: dict[str, str] = {
    # The reproducible-builds variable: gcc's __DATE__/__TIME__, Python's py_compile and wheel/
    # setuptools archives, Sphinx, groff/man, dpkg, rpm, javadoc and most packagers.
    "SOURCE_DATE_EPOCH": str(PINNED_EPOCH),
    # git commit, tag, merge, rebase, am: the dates written into the commit object.
    "GIT_AUTHOR_DATE": f"@{PINNED_EPOCH} +0000",
    "GIT_COMMITTER_DATE": f"@{PINNED_EPOCH} +0000",
}


def pin_clock(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """`env` with every CLOCK_ENV variable set (the caller's value wins), and what was done, one line each."""
    pinned = dict(env)
    said = []
    for name, value in CLOCK_ENV.items():
        if name in env:
            said.append(f"{name}={env[name]} (the caller's)")
        else:
            pinned[name] = value
            said.append(f"{name}={value}")
    return pinned, said
