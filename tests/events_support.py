"""Recorded black-box runs (tests/data/blackbox/, from real observed runs of the fake agent) to mutate.

`pass.events.jsonl`: the default fake-agent run (every status pass).
`fail.events.jsonl`: a run that edited CI, printed prose with an emoji and added no test.
`claude-logged-out.events.jsonl`: the real Claude Code CLI 2.1.197 (npm @anthropic-ai/claude-code),
not logged in, `--net isolated`: it ran 15 commands (git, rg, ps | grep) and exited 1.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from blackbox.check import check_bytes
from blackbox.check.base import Violation

DATA = Path(__file__).resolve().parent / "data" / "blackbox"


def load(name: str = "pass") -> list[dict]:
    """The events of a recorded run, as fresh objects to mutate."""
    text = (DATA / f"{name}.events.jsonl").read_text(encoding="utf-8")
    return copy.deepcopy([json.loads(line) for line in text.splitlines()])


def dump(events: list[dict]) -> bytes:
    return b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in events)


def check(events: list[dict]) -> list[Violation]:
    return check_bytes(dump(events))


def by_name(events: list[dict], name: str) -> dict:
    return next(e for e in events if e["event"] == name)


def only(violations: list[Violation], rule: str) -> list[Violation]:
    """The violations of one rule family; asserts that no other family fired."""
    others = [v for v in violations if v.rule != rule]
    assert not others, f"unexpected violations of other rules: {others}"
    return [v for v in violations if v.rule == rule]
