"""The vocabulary of black-box DecisionEvents: event catalog, enums, POC constraints.

One place for every name the writer emits and the validator checks, so the
two cannot drift apart (../shared/spec/decision-events-blackbox.md and the
9-event catalog of the reference's design/events-blackbox.md).
"""

from __future__ import annotations

SCHEMA_VERSION = "0.2"
"""The reference observer's schema_version: its users can switch without a reader change."""

EVENT_FIELD = "event"
"""The explicit event-name field each line carries besides the contract's fields."""

MODE = "black_box"

RUN_STARTED = "run_started"
WORKSPACE_PREPARED = "workspace_prepared"
AGENT_INVOKED = "agent_invoked"
AGENT_COMPLETED = "agent_completed"
ARTIFACTS_CAPTURED = "artifacts_captured"
FS_DIFF_CAPTURED = "fs_diff_captured"
COMMANDS_OBSERVED = "commands_observed"
COMMANDS_UNAVAILABLE = "commands_observation_unavailable"
EVALUATION_PERFORMED = "evaluation_performed"
RUN_FINISHED = "run_finished"

CATALOG: tuple[tuple[str, ...], ...] = (
    (RUN_STARTED,),
    (WORKSPACE_PREPARED,),
    (AGENT_INVOKED,),
    (AGENT_COMPLETED,),
    (ARTIFACTS_CAPTURED,),
    (FS_DIFF_CAPTURED,),
    (COMMANDS_OBSERVED, COMMANDS_UNAVAILABLE),
    (EVALUATION_PERFORMED,),
    (RUN_FINISHED,),
)
"""The normative order: one slot per step, slot 7 is `commands_observed` or its 7b."""

EVENT_NAMES = frozenset(name for slot in CATALOG for name in slot)

ACTION_TYPES = frozenset({
    "plan", "edit", "run_tests", "command", "open_pr", "merge", "deploy",
    "api_call", "message", "no_op", "other",
})
ACTION_BY_EVENT: dict[str, frozenset[str]] = {
    RUN_STARTED: frozenset({"other"}),
    WORKSPACE_PREPARED: frozenset({"other"}),
    AGENT_INVOKED: frozenset({"plan", "other"}),
    AGENT_COMPLETED: frozenset({"other"}),
    ARTIFACTS_CAPTURED: frozenset({"other"}),
    FS_DIFF_CAPTURED: frozenset({"edit"}),
    COMMANDS_OBSERVED: frozenset({"command", "run_tests"}),
    COMMANDS_UNAVAILABLE: frozenset({"other"}),
    EVALUATION_PERFORMED: frozenset({"other"}),
    RUN_FINISHED: frozenset({"other"}),
}
"""The action types the catalog allows per event (evaluation_performed: unspecified, we use other)."""

ENVIRONMENTS = frozenset({"local", "ci", "staging", "prod", "unknown"})
CAPTURE_MODES = ("full", "redacted", "hashed")
WORKSPACE_MODES = ("empty", "existing")
CONSTRAINT_TYPES = frozenset({"style", "safety", "format", "scope", "quality", "other"})
STATUSES = frozenset({"pass", "warn", "fail", "unknown"})
SEVERITIES = frozenset({"warn", "fail"})
DIFF_METHODS = frozenset({"git_diff", "diff_ru", "other"})
AGENT_ID = "claude-code"
"""The only agent_id the POC contract allows."""

UNAVAILABLE_REASONS = (
    "wrappers disabled", "no wrapped binaries invoked", "permission issue", "unknown",
)
"""The reasons the catalog lists for 7b; the runner's summary names one of them."""

# The POC constraint vocabulary: id -> (type, evaluation section, rule text).
JSON_ONLY = "output.json_only"
NO_EMOJIS = "style.no_emojis"
NO_CI_CHANGES = "scope.no_ci_changes"
TESTS_REQUIRED = "quality.tests_required"
POC_CONSTRAINTS: dict[str, tuple[str, str, str]] = {
    JSON_ONLY: ("format", "alignment", "The final output must be valid JSON and nothing else"),
    NO_EMOJIS: ("style", "policy", "No emojis in the output"),
    NO_CI_CHANGES: ("scope", "policy", "Do not modify the CI configuration"),
    TESTS_REQUIRED: ("quality", "quality", "Tests must be added and run"),
}

ARTIFACT_STDOUT = "claude_stdout.txt"
ARTIFACT_STDERR = "claude_stderr.txt"
ARTIFACT_DIFF = "fs_diff.patch"
ARTIFACT_COMMANDS = "command_logs.jsonl"
EVIDENCE_SOURCES = (ARTIFACT_DIFF, ARTIFACT_COMMANDS, ARTIFACT_STDOUT, ARTIFACT_STDERR)
"""The artifacts a finding may cite (observed: diff, command log; declared: stdout/stderr)."""

MAX_EVIDENCE_CHARS = 400
"""Evidence must be bounded (contract section 7): a longer excerpt is a violation."""
