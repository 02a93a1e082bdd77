"""Health notes for the command's seccomp filter: what it refused, and what it let through unseen.

From the spool's trailer only (runner/enforce/seccomp.py fills it), so
`assay-runner normalize` writes the same notes the run did.
"""

from __future__ import annotations

from spool.format import SpoolTrailer


def refusal_notes(trailer: SpoolTrailer) -> list[str]:
    """`s3_syscalls_refused` (counts by class) and `s2_compat_syscalls` (when they were allowed)."""
    notes = []
    if trailer.refused_syscalls:
        notes.append("s3_syscalls_refused: " + " ".join(
            f"{k}={v}" for k, v in sorted(trailer.refused_syscalls.items())))
    if trailer.compat_syscalls_allowed:
        notes.append("s2_compat_syscalls: allowed=true traced=false")
    return notes
