"""Black-box DecisionEvents (../shared/spec/decision-events-blackbox.md): pure parts.

Scenario parsing, capture modes, the command-log model, the evaluation, the
events writer and the `check-events` validator. Nothing here touches the
kernel or the runner's capture side (the import contracts in pyproject.toml): the
orchestration that runs an agent lives in runner/blackbox/.
"""
