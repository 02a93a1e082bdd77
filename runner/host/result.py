"""The outcome of one host prerequisite check, shared by `doctor` and `run`.

Each check returns a `Check`; a failing one carries the one-line guidance
that both `doctor` and `run` print.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """One prerequisite: what was found, and what to do when it is missing."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True

    @property
    def status(self) -> str:
        """'ok', 'FAIL' (a required check failed) or 'warn' (an optional one)."""
        if self.ok:
            return "ok"
        return "FAIL" if self.required else "warn"

    @property
    def message(self) -> str:
        """The one line a user reads: the finding, then what to do about it."""
        return f"{self.detail}: {self.fix}" if self.fix and not self.ok else self.detail
