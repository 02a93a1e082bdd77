"""What every rule family shares: the violation record and typed field access."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from blackbox.catalog import EVENT_FIELD, EVENT_NAMES

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_BRACKET_NAME = re.compile(r"^\[([a-z_]+)\]")

NUMBER = (int, float)


@dataclass(frozen=True, order=True)
class Violation:
    """One broken rule: where (1-based line), which rule family/id, and what is wrong."""

    line: int
    rule: str
    message: str

    def render(self, filename: str) -> str:
        return f"{filename}:{self.line}: [{self.rule}] {self.message}"


@dataclass(frozen=True)
class Line:
    """One parsed line: its number and object (None when the line is not a JSON object)."""

    number: int
    event: dict[str, Any] | None

    @property
    def name(self) -> str | None:
        """The event name: the explicit `event` field, else the reference's `[name]` summary prefix."""
        if self.event is None:
            return None
        name = self.event.get(EVENT_FIELD)
        if isinstance(name, str):
            return name
        summary = get(self.event, "agent_action", "action_summary")
        m = _BRACKET_NAME.match(summary) if isinstance(summary, str) else None
        return m.group(1) if m and m.group(1) in EVENT_NAMES else None


def get(obj: Any, *path: str) -> Any:
    """obj[path...] or None where any step is missing or not an object."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def is_type(value: Any, types: tuple[type, ...] | type) -> bool:
    """isinstance, except that a bool is never a number."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        return False
    return isinstance(value, types)


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC3339 timestamp with a zone, or None."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
