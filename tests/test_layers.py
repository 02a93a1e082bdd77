"""The layering the architecture promises, enforced on the imports themselves.

Pure packages (the normalizer, the policy model, the spool format) must stay
importable without the runner, so `normalize SPOOL` works offline and the
normalizer is testable on recorded spools; the offline evidence tools must
never pull in the capture side (BCC, cgroups, namespaces). A module over
about 500 lines is a sign that it does more than one job.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runner", "normalizer", "policy", "spool", "ebpf", "assay_sdk", "blackbox", "probe_harness")

# package prefix -> import prefixes it must never reach
FORBIDDEN = {
    "normalizer": ("runner", "bcc"),
    "policy": ("runner", "normalizer", "ebpf", "bcc"),
    "spool": ("runner", "bcc"),
    "runner.evidence": ("runner.capture", "runner.enforce", "runner.host", "ebpf", "bcc"),
    "blackbox": ("runner", "ebpf", "bcc"),
    # the probe harness drives the runner through its command line and reads archives only
    "probe_harness": ("runner.capture", "runner.enforce", "runner.host", "runner.cli", "ebpf", "bcc"),
    "runner.review": ("runner.capture", "runner.enforce", "runner.host", "ebpf", "bcc"),
}
MAX_LINES = 520


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((name, path))
    return out


def _imports(path: Path) -> set[str]:
    """Every module name an import statement in `path` names (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _reaches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_layers_are_respected() -> None:
    problems = []
    for module, path in _modules():
        for layer, forbidden in FORBIDDEN.items():
            if not _reaches(module, layer):
                continue
            for imported in sorted(_imports(path)):
                bad = [f for f in forbidden if _reaches(imported, f)]
                if bad:
                    where = path.relative_to(ROOT)
                    problems.append(f"{where} imports {imported} ({layer} must not use {bad[0]})")
    assert problems == []


def test_the_layer_check_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from runner.capture.session import execute\nimport bcc\n")
    assert {"runner.capture.session", "runner.capture.session.execute", "bcc"} <= _imports(bad)
    assert _reaches("runner.capture.session", "runner.capture")
    assert not _reaches("runner.captured", "runner.capture")


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: str(v))
def test_modules_stay_small(module: str, path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it by job"
