"""Helpers for tests that drive the real `assay-runner` CLI."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from runner.capture.cgroup import parent_name
from runner.evidence.archive import read_archive
from runner.evidence.validate import validate_members
from runner.host.ci import on_ci
from runner.host.mounts import cgroup2_mount

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "runner.cli.main"]
ASSAY_COMPAT = ROOT.parent / "shared" / "tools" / "assay-compat" / "assay_compat.py"
"""The independent checker of Assay's rules; CI clones the repo with `../shared/` beside it."""
ON_CI = on_ci()
"""Whether this is CI (runner.host.ci, as the runner decides it): there, a skip is a failure (conftest.py)."""


def assay_compat(*archives: Path) -> subprocess.CompletedProcess[str]:
    """Run `assay_compat.py` on `archives` with this interpreter (it needs `jsonschema`).

    Missing checker: a failure on CI (CI=true), a skip elsewhere, never a silent pass.
    """
    if not ASSAY_COMPAT.is_file():
        message = f"{ASSAY_COMPAT} is missing: clone the repo with ../shared/ beside it"
        pytest.skip(message)  # a failure on CI (conftest.py)
    return subprocess.run([sys.executable, str(ASSAY_COMPAT), *map(str, archives)],
                          capture_output=True, text=True, timeout=300, check=False)


def assert_assay_accepts(*archives: Path) -> None:
    """assay_compat.py reports 0 problems on every one of `archives`."""
    proc = assay_compat(*archives)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("assay-compat: 0 problems in ")


def unique_run_id(prefix: str) -> str:
    """A run id no other test (or xdist worker, or helper on the host) uses: `PREFIX-<8 hex>`.

    Run ids name cgroups, default `--out` archives and staged files; a fixed id
    shared between tests makes them see each other's state (tests/README.md).
    """
    return f"{prefix}-{secrets.token_hex(4)}"


def run_cgroups(run_id: str) -> list[str]:
    """The live cgroups of runs with id `run_id` (the runner names them `RUN_ID-...` under its parent,
    which conftest makes this test process's own).

    With a `unique_run_id`, only the test's own runs can match.
    """
    parent = cgroup2_mount() / parent_name()
    if not parent.exists():
        return []
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f"{run_id}-"))


def runner_env(**extra: str) -> dict[str, str]:
    """The test's environment minus SUDO_* (plus `extra`): the command's identity is the test's choice."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")}
    return {**env, **extra}


def assay(*args: str | Path, cwd: Path | None = None, timeout: float = 300,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would; output captured as text, the runner's logs as JSON lines (the
    tests read them; a later --log-format in `args` wins).

    Without `env`, the test's environment minus SUDO_*: whether pytest itself
    was started through sudo must not change whom the command runs as.
    """
    return subprocess.run(
        [*CLI, "--log-format", "json", *map(str, args)], cwd=cwd, capture_output=True, text=True,
        timeout=timeout, env=runner_env() if env is None else env, stdin=subprocess.DEVNULL,
    )


def run_observed(out: Path, run_id: str, *cmd: str | Path, workdir: Path | None = None,
                 extra: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 ) -> subprocess.CompletedProcess[str]:
    """`assay-runner run` with the usual options; fails loudly on runner errors."""
    args: list[str | Path] = ["run", "--out", out, "--run-id", run_id, "--force", *extra]
    if workdir is not None:
        args += ["--workdir", workdir]
    proc = assay(*args, "--", *cmd, cwd=workdir, env=env)
    assert proc.returncode != 125, proc.stderr
    return proc


class Archive:
    """A written archive, parsed for assertions, after the full conformance check.

    Every archive a test reads through this class must pass the contract and
    all of Assay's rules (runner/evidence/conformance/), whatever else the
    test asserts about it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.members = read_archive(path)
        assert validate_members(self.members) == [], f"{path} fails conformance"

    def json(self, name: str) -> dict:
        return json.loads(self.members[name])

    def lines(self, name: str) -> list[dict]:
        return [json.loads(line) for line in self.members[name].decode().splitlines() if line]

    @property
    def kernel(self) -> list[dict]:
        return self.lines("layers/kernel.ndjson")

    @property
    def health(self) -> dict:
        return self.json("observation-health.json")

    @property
    def surface(self) -> dict:
        return self.json("capability-surface.json")

    def values(self, kind: str) -> list[str]:
        return [e["value"] for e in self.kernel if e["kind"] == kind]
