"""Writing events.jsonl as the run happens: append-only, one fsync'd line per event.

The file is opened once with O_APPEND|O_EXCL and never rewritten, so a run
killed at any point leaves every event written so far intact and valid. Each
line carries the contract's fields in a fixed key order plus the explicit
`event` name. Ids follow W3C trace context sizes (trace 16 bytes, span 8);
the timestamp is the UTC wall clock, clamped so lines never go backwards in
time even if the clock is stepped.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from blackbox.catalog import EVENT_FIELD, MODE, SCHEMA_VERSION
from blackbox.evaluate import unknown_evaluation


def rfc3339(t: dt.datetime) -> str:
    """UTC, microseconds, `Z` suffix: sorts as text in time order."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class RunIdentity:
    """What every event of a run repeats: session, request and prompt provenance."""

    session: dict[str, str]
    request_id: str
    user_request: str
    provider: str
    capture_mode: str
    context: dict[str, object] = field(default_factory=dict)


@dataclass
class Artifact:
    """An artifact object of the contract (type, id, summary, content_ref, hash, metadata)."""

    type: str
    summary: str
    content_ref: str | None
    hash: str
    metadata: dict[str, object] = field(default_factory=dict)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def as_event(self) -> dict[str, object]:
        return {"type": self.type, "id": self.id, "summary": self.summary,
                "content_ref": self.content_ref, "hash": self.hash, "metadata": self.metadata}


class EventWriter:
    """Appends the events of one run to its events.jsonl."""

    def __init__(self, path: Path, identity: RunIdentity) -> None:
        self.path = path
        self.identity = identity
        self.trace_id = secrets.token_hex(16)
        self.spans: list[str] = []
        self.names: list[str] = []
        self._last = dt.datetime.min.replace(tzinfo=dt.UTC)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def now(self) -> dt.datetime:
        """The next timestamp: wall clock, never earlier than the previous line's."""
        self._last = max(dt.datetime.now(dt.UTC), self._last)
        return self._last

    def _span(self) -> str:
        span = secrets.token_hex(8)
        while span in self.spans:  # 2^-64 per pair, but uniqueness is a contract rule
            span = secrets.token_hex(8)
        return span

    def emit(self, name: str, parent: str | None, *, action_type: str, summary: str,
             artifacts: tuple[Artifact, ...] = (), constraints: tuple[dict[str, str], ...] = (),
             context: dict[str, object] | None = None, output_raw: str | None = None,
             evaluation: dict[str, dict[str, object]] | None = None) -> str:
        """Write one event line (fsync'd) and return its span id, the parent of later events."""
        ident = self.identity
        span = self._span()
        event: dict[str, object] = {
            "schema_version": SCHEMA_VERSION,
            EVENT_FIELD: name,
            "event_id": str(uuid.uuid4()),
            "timestamp": rfc3339(self.now()),
            "trace_id": self.trace_id,
            "span_id": span,
            "parent_span_id": parent,
            "observability_mode": MODE,
            "session": ident.session,
            "request": {
                "request_id": ident.request_id,
                "user_request_raw": ident.user_request,
                "constraints": list(constraints),
                "context": context if context is not None else {},
            },
            "prompt_provenance": {
                "provider": ident.provider,
                "model": "unknown",
                "capture_mode": ident.capture_mode,
                "prompt_bundle": None,
                "prompt_bundle_hash": "unknown",
                "parameters": {"temperature": None, "top_p": None, "max_tokens": None},
            },
            "model_output": {
                "completion_id": None,
                "output_raw": output_raw,
                "output_structured": None,
                "tool_calls": [],
                "usage": {"input_tokens": None, "output_tokens": None, "latency_ms": None},
            },
            "agent_action": {
                "action_type": action_type,
                "action_summary": summary,
                "artifacts": [a.as_event() for a in artifacts],
                "tool_results": [],
            },
            "evaluation": evaluation if evaluation is not None else unknown_evaluation(),
        }
        self._write(event)
        self.spans.append(span)
        self.names.append(name)
        return span

    def _write(self, event: dict[str, object]) -> None:
        try:
            line = json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from undecodable bytes: escape it instead
            line = json.dumps(event, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        data = line + b"\n"
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
