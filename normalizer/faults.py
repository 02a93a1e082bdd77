"""Health notes for runs a fault shaped: ended from outside, recovered after the runner died, limited.

Each note says what happened in `key=value` words (docs/artifacts.md,
"Faults"); they come from the spool's trailer only, so `assay-runner
normalize` writes the same notes the run did.
"""

from __future__ import annotations

from spool.format import SpoolTrailer

ENDED_PHASE = "command"
"""`ended_by` is set only by the drain loop, while the command runs (runner/capture/interrupt.py):
a signal during set-up leaves no archive, one after the command exited does not end the capture."""


def unobserved(trailer: SpoolTrailer) -> str:
    """The interval a recovered run was not observed: from the spool's last flush to the runner's
    death, in ms, when both are known; else `unknown` (the recovery did not see the death)."""
    if trailer.last_flush_ns is None or trailer.died_ns is None:
        return "unobserved=last_flush..runner_death unobserved_ms=unknown"
    ms = max(trailer.died_ns - trailer.last_flush_ns, 0) / 1e6
    return f"unobserved=last_flush..runner_death unobserved_ms={ms:.1f}"


def fault_notes(trailer: SpoolTrailer) -> list[str]:
    """The `s2_run_ended`, `s2_run_recovered` and `s3_resource_limits` notes the trailer calls for."""
    notes = []
    if trailer.ended_by:
        notes.append(f"s2_run_ended: reason={trailer.ended_by} phase={ENDED_PHASE}")
    if trailer.recovered:
        notes.append(f"s2_run_recovered: cause={trailer.recovered} command_exit=unknown "
                     f"kernel_counters=unknown records_after_last_flush=lost {unobserved(trailer)}")
    if trailer.limits_hit or trailer.limits_unavailable:
        words = [f"{k}={v}" for k, v in sorted({**trailer.limits, **trailer.limits_hit}.items())]
        if trailer.limits_unavailable:
            words.append("unavailable=" + ",".join(sorted(trailer.limits_unavailable)))
        notes.append("s3_resource_limits: " + " ".join(words))
    return notes
