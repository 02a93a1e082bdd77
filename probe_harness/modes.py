"""Run modes and the environment a probe runs with.

A run mode says where a probe runs: `baseline` (directly, no sandbox), one
mode per runner preset (`read-only`, `workspace-write`,
`danger-full-access`: under `assay-runner run --sandbox MODE`, so the kernel
layer of the run can corroborate each record), and `external` (under a
sandbox wrapper command the user names, such as bubblewrap, whose policy the
harness does not assume). The admissible names come from the boundary
schema's `run.mode` enum, so a schema key without a mode cannot be used for
it (cfbo-v1 admits only baseline).
"""

from __future__ import annotations

import os
import shlex
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from probe_harness import PROBES_DIR
from probe_harness.contracts import BOUNDARY_ENV, CATALOG_ENV
from probe_harness.emit import RUN_MODE_ENV, WORKSPACE_ENV
from probe_harness.stack import SANDBOX_ENV, SANDBOX_MODES

BASELINE = "baseline"
EXTERNAL = "external"
RUNNER_MODES = SANDBOX_MODES
DEFAULT_MATRIX_MODES = (BASELINE, *RUNNER_MODES)
WORKSPACE_PLACEHOLDER = "{workspace}"
TMP_SUBDIR = ".fence-tmp"
BIN_DIR = Path(sysconfig.get_path("scripts"))
HARNESS_BIN_ENV = "FENCE_HARNESS_BIN"
"""Where `bin/` (the helpers upstream-style probes call as `${repo_root}/bin/NAME`) finds the
harness's own commands."""


class ModeError(ValueError):
    """A run mode cannot be used as asked; the message says what to do."""


@dataclass(frozen=True)
class Settings:
    """Everything a probe run needs besides the probe and the mode."""

    workspace: Path
    catalog: Path
    boundary: Path
    out: Path
    wrapper: tuple[str, ...] = ()
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    probes_dir: Path = PROBES_DIR

    @property
    def tmpdir(self) -> Path:
        """The workspace-local TMPDIR probes get (created before any sandbox starts)."""
        return self.workspace / TMP_SUBDIR

    def wrapper_argv(self) -> list[str]:
        """The wrapper command with `{workspace}` replaced by the workspace path."""
        if not self.wrapper:
            raise ModeError(
                "mode 'external' needs a wrapper command: pass --wrapper 'bwrap --ro-bind / / ...'"
            )
        return [part.replace(WORKSPACE_PLACEHOLDER, str(self.workspace)) for part in self.wrapper]


def parse_wrapper(text: str | None) -> tuple[str, ...]:
    """Split a wrapper command line the way a shell would (no expansion)."""
    if not text:
        return ()
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ModeError(f"cannot parse --wrapper {text!r}: {exc}") from None


def check_modes(modes: list[str], admitted: tuple[str, ...], settings: Settings) -> None:
    """Every mode known, admitted by the schema key, and usable on this host."""
    for mode in modes:
        if mode not in (BASELINE, EXTERNAL, *RUNNER_MODES):
            raise ModeError(
                f"unknown run mode {mode!r}: use {BASELINE}, {', '.join(RUNNER_MODES)} or {EXTERNAL}"
            )
        if mode not in admitted:
            raise ModeError(
                f"run mode {mode!r} is not admitted by the boundary schema in use "
                f"(run.mode allows {', '.join(admitted)}): use a descriptor that admits it "
                "(catalogs/cfbo-linux-v1.json)"
            )
        if mode in RUNNER_MODES and os.geteuid() != 0:
            raise ModeError(
                f"run mode {mode!r} runs probes under assay-runner, which needs root (or: --modes baseline)"
            )
        if mode == EXTERNAL:
            settings.wrapper_argv()


def probe_env(mode: str, settings: Settings) -> dict[str, str]:
    """The FENCE_* environment probe-exec exports (probe-boundary-object.md)."""
    env = dict(settings.base_env)
    env.update(
        {
            RUN_MODE_ENV: mode,
            SANDBOX_ENV: mode if mode in RUNNER_MODES else "",
            WORKSPACE_ENV: str(settings.workspace),
            CATALOG_ENV: str(settings.catalog),
            BOUNDARY_ENV: str(settings.boundary),
            "TMPDIR": str(settings.tmpdir),
            HARNESS_BIN_ENV: str(BIN_DIR),
            "PATH": f"{BIN_DIR}{os.pathsep}{settings.base_env.get('PATH', os.defpath)}",
        }
    )
    return env
