"""The acceptance gates: one registry entry per gate.

A gate is a command observed three times under `assay-runner determinism`
(byte-identical archives, passing health), or an agent run three times by
`assay-runner observe` on a scenario (the same comparison, and every
events.jsonl must pass `check-events`), whose archives must validate and
whose evidence must match the gate's expectations file
(`fixtures/acceptance/<name>.toml`, format in expect.py). Adding a gate is
one `Gate(...)` entry here plus its expectations file; the workflow gets one
step for it (a test checks that every registered gate has one).

The probe-matrix gate is the exception: probe records are not
byte-identical by design, so it runs `probe --matrix` three times and has a
rule of its own (probe_gate.py: identical outcome tables, valid records and
archives, each run corroborated by its own kernel evidence).

A gate whose prerequisite is missing (the OpenAI Agents SDK not installed, a
fixture not in this checkout) *could not run*: that is reported apart from a
failure, and is never a pass.

Placeholders in `command`, `policy` and `workspace`: `{repo}` the checkout the
fixtures come from, `{python}` the interpreter running assay-runner (the
venv's, where the SDK is installed).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import runner

REPO = Path(runner.__file__).resolve().parents[1]
"""The checkout the fixtures and expectations are read from."""

GATED_PATHS = (
    ".github/workflows/delegated-acceptance.yml",
    "Makefile",
    "assay_sdk",
    "blackbox",
    "catalogs",
    "ebpf",
    "fixtures",
    "normalizer",
    "policy",
    "probe_harness",
    "probes",
    "pyproject.toml",
    "runner",
    "schema",
    "scripts/build_native.sh",
    "scripts/setup.sh",
    "spool",
)
"""What the gates exercise: a change here needs the gates (the workflow's
pull_request paths) and the proof pack records each one's git tree id."""

FIXTURE_WORKSPACE = "fixtures/agent/workspace"
FIXTURE_POLICY = "fixtures/agent/policy.toml"


@dataclass(frozen=True)
class PythonModule:
    """The gate needs `{python}` to import a module (e.g. the OpenAI Agents SDK)."""

    module: str
    fix: str

    def missing(self, python: str) -> str | None:
        """Why the prerequisite is missing, or None."""
        done = subprocess.run([python, "-c", f"import {self.module}"], capture_output=True,
                              text=True, check=False)
        if done.returncode == 0:
            return None
        last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        return f"{python} cannot import {self.module} ({last}): {self.fix}"


def console_script(python: str, name: str) -> Path:
    """A console script of the environment `python` runs in (next to the interpreter)."""
    return Path(python).parent / name


@dataclass(frozen=True)
class ConsoleScript:
    """The gate needs a console script of the environment (e.g. the probe harness's `probe`)."""

    name: str
    fix: str

    def missing(self, python: str) -> str | None:
        """Why the prerequisite is missing, or None."""
        path = console_script(python, self.name)
        return None if os.access(path, os.X_OK) else f"{path} is not an executable: {self.fix}"


@dataclass(frozen=True)
class Gate:
    """One named acceptance gate."""

    name: str
    title: str
    command: tuple[str, ...]
    policy: str | None = None
    workspace: str = FIXTURE_WORKSPACE
    requires: tuple[PythonModule | ConsoleScript, ...] = ()
    scenario: str | None = None
    """Set for an observed DecisionEvents gate: `command` is the agent, run three times by
    `assay-runner observe --scenario` (its events.jsonl must pass `check-events`)."""
    probe_matrix: bool = False
    """The probe-matrix gate: `command` is `probe --matrix`, run three times and judged by
    its outcome tables and kernel corroboration (probe_gate.py), not by byte identity."""

    @property
    def expectations(self) -> Path:
        """Its default expectations file."""
        return REPO / "fixtures" / "acceptance" / f"{self.name}.toml"

    @property
    def fixture(self) -> Path:
        """What the gate needs from the checkout: its scenario, the probes, or the workspace it copies."""
        return REPO / (self.scenario or ("probes" if self.probe_matrix else self.workspace))

    @property
    def run_id(self) -> str:
        return f"acceptance-{self.name}"

    def expand(self, text: str, python: str) -> str:
        return text.format(repo=REPO, python=python)


# Shell commands spell every program by absolute path, so the expected execs
# do not depend on PATH; `exit 0` keeps the exit code independent of the
# refused operations before it.
KERNEL_ONLY = ("read -r line < README.md; /bin/mkdir -p notes; "
               'echo "$line" > notes/kernel-only.txt; /bin/cat notes/kernel-only.txt')
KERNEL_POLICY = ("read -r line < README.md; echo \"$line\" > policy-out.txt; "
                 "echo refused > /tmp/assay-acceptance-outside.txt; "
                 "echo > /dev/tcp/127.0.0.1/9; echo > /dev/tcp/127.0.0.1/9999; exit 0")
SDK = PythonModule("agents", "install the SDK fixture's extra: make setup (pip install -e '.[sdk]')")
PROBE = ConsoleScript("probe", "install the checkout into this environment: make setup")

GATES = (
    Gate("kernel-only", "kernel layer only: files and execs of a shell, no policy, no SDK",
         ("/bin/sh", "-c", KERNEL_ONLY)),
    Gate("kernel-policy", "kernel + policy: a shell refused a write outside the workspace and a connect",
         ("/bin/bash", "-c", KERNEL_POLICY), policy=FIXTURE_POLICY),
    Gate("openai-agents-kernel-policy", "the OpenAI Agents SDK fixture under its policy (make demo)",
         ("{python}", "-B", "{repo}/fixtures/agent/openai_agent.py"), policy=FIXTURE_POLICY,
         requires=(SDK,)),
    Gate("hidden-write", "a read_file tool call that also writes a file it did not declare",
         ("{python}", "-B", "{repo}/fixtures/agent/hidden_write_agent.py"), policy=FIXTURE_POLICY),
    Gate("decision-events", "an observed DecisionEvents run: the fake Claude Code CLI on a scenario",
         ("{repo}/fixtures/agent/fake-claude/claude", "-p", "{{prompt}}"),
         scenario="fixtures/scenarios/summarize-logs"),
    Gate("probe-matrix", "the probe matrix: every probe under baseline and the three presets, "
         "corroborated by the kernel", ("probe", "--matrix"), requires=(PROBE,), probe_matrix=True),
)
BY_NAME = {g.name: g for g in GATES}
ALL = "all"


def select(spec: str) -> list[Gate]:
    """`all` or comma-separated gate names, in registry order; ValueError names an unknown one."""
    if spec == ALL:
        return list(GATES)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise ValueError(f"unknown gate {', '.join(unknown) or '(none given)'}: "
                         f"choose {ALL} or from {', '.join(BY_NAME)}")
    return [g for g in GATES if g.name in names]
