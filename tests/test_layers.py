"""The layering the architecture promises, enforced on the imports themselves.

The contracts are import-linter's, in pyproject.toml (`[tool.importlinter]`):
the stack of layers, BCC only inside `ebpf/`, the pure packages (normalizer,
policy, spool, blackbox) never reaching the runner or the sensor, the
offline tools never reaching the capture side, and no import cycle between
the modules of one package. `lint-imports` reads every import statement,
those inside functions and under TYPE_CHECKING included, and follows chains of
imports, so an indirect path to a forbidden module breaks a contract too. A
module over about 500 lines is a sign that it does more than one job.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runner", "normalizer", "policy", "spool", "ebpf", "assay_sdk", "blackbox", "probe_harness")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
MAX_LINES = 520
TOOL = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((name, path))
    return out


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the packages in `tree`, with the contracts of its pyproject.toml.

    The linter puts its working directory first on sys.path, so a copy of the tree is
    analysed instead of the checkout the venv points at. No cache: nothing is written there.
    """
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_import_contracts_hold() -> None:
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    contracts = len(TOOL["importlinter"]["contracts"])
    assert f"Contracts: {contracts} kept, 0 broken." in proc.stdout, proc.stdout  # each was checked


def _stack() -> list[str]:
    """The layers of pyproject.toml's `layers` contract, top first."""
    (stack,) = (c["layers"] for c in TOOL["importlinter"]["contracts"] if c["type"] == "layers")
    return stack


def test_the_stack_places_every_package() -> None:
    """A new package, or a new subpackage or module directly under runner/, gets a layer: one left
    out would be bound by no layer at all."""
    shipped = {name.rstrip("*") for name in TOOL["setuptools"]["packages"]["find"]["include"]}
    assert set(PACKAGES) == set(TOOL["importlinter"]["root_packages"]) == shipped
    placed = {name.strip() for layer in _stack() for name in layer.split("|")}
    runner = {f"runner.{p.stem if p.is_file() else p.name}" for p in (ROOT / "runner").iterdir()
              if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert placed == set(PACKAGES) - {"runner"} | runner


def test_the_documented_stack_is_the_contract() -> None:
    """docs/architecture.md ("Layers") draws the stack that pyproject.toml's `layers` contract checks."""
    stack = _stack()

    def shown(name: str) -> str:
        path = name.replace(".", "/")
        return path if (ROOT / path).is_dir() else f"{path}.py"

    expected = [" | ".join(shown(n.strip()) for n in layer.split("|")) for layer in stack]
    doc = (ROOT / "docs" / "architecture.md").read_text()
    drawn = doc.split("**The stack.**", 1)[1].split("```", 2)[1]
    assert [line.strip() for line in drawn.strip().splitlines()] == expected


def _copy_tree(into: Path) -> Path:
    """The packages' Python sources and pyproject.toml, copied into `into` (no built pieces)."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, into / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.h"))
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


# (module to change, the line added, the contract it must break, the import the report names):
# an upward import each, and a cycle
UPWARD = [
    pytest.param("normalizer/text.py", "from runner.cli import main\n",
                 "The stack", "normalizer.text -> runner.cli", id="normalizer-imports-the-cli"),
    pytest.param("runner/evidence/validate.py", "def _sensor() -> None:\n    import ebpf.monitor\n",
                 "The offline tools never reach the capture side", "runner.evidence.validate -> ebpf.monitor",
                 id="evidence-imports-the-sensor-in-a-function"),
    pytest.param("runner/host/mounts.py", "import bcc\n",
                 "Only ebpf/ imports BCC", "runner.host.mounts -> bcc", id="host-imports-bcc"),
    pytest.param("spool/writer.py", "from runner.capture import session\n",
                 "The pure packages never reach the runner", "spool.writer -> runner.capture",
                 id="spool-imports-capture"),
    pytest.param("normalizer/telemetry.py", "from normalizer.classify import Classified\n",
                 "No import cycles", ".telemetry -> .classify", id="a-cycle-inside-the-normalizer"),
]


@pytest.mark.parametrize(("module", "line", "contract", "named"), UPWARD)
def test_the_linter_fails_on_an_added_upward_import(tmp_path: Path, module: str, line: str, contract: str,
                                                    named: str) -> None:
    tree = _copy_tree(tmp_path)
    unchanged = _lint(tree)
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr  # the copy alone passes
    with open(tree / module, "a") as f:
        f.write(line)
    proc = _lint(tree)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    broken = proc.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, proc.stdout
    assert named in broken, proc.stdout


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: str(v))
def test_modules_stay_small(module: str, path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it by job"
