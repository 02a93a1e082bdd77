"""Test helpers have one import path, so each is one module object.

pytest imports a test file by its own name (`test_surface`: tests/ has no
`__init__.py`), and the helpers beside it as `tests.<name>`, as conftest.py
does. A helper imported both as `support` and as `tests.support` would be two
modules with two copies of every global (the CI flag, caches, registries):
what one test sets, another would not see.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import tests.support
from tests.support import ROOT

TESTS = ROOT / "tests"
HELPERS = frozenset(p.stem for p in TESTS.glob("*.py") if not p.stem.startswith(("test_", "conftest")))


def wrong_imports(path: Path) -> list[str]:
    """Imports in `path` that load a test file under a second name: a helper by its bare name, or a
    test module through the `tests.` package (pytest loads it by its bare name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                 else [])
        for name in names:
            top, _, rest = name.partition(".")
            if (top in HELPERS and not rest) or (top == "tests" and rest.startswith("test_")):
                found.append(f"{path.name}:{node.lineno}: {name}")
    return found


def loaded_twice(modules: Mapping[str, ModuleType]) -> dict[str, list[str]]:
    """Files under tests/ that back more than one module object in `modules`, with their names."""
    by_file: dict[str, list[str]] = {}
    for name, module in list(modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().parent == TESTS:
            by_file.setdefault(file, []).append(name)
    return {file: sorted(names) for file, names in by_file.items() if len(names) > 1}


def test_every_test_file_imports_helpers_through_the_tests_package() -> None:
    assert [hit for path in sorted(TESTS.glob("*.py")) for hit in wrong_imports(path)] == []


def test_the_import_check_sees_a_bare_helper_import(tmp_path: Path) -> None:
    bad = tmp_path / "test_bad.py"
    bad.write_text("from support import ROOT\nimport tests.test_surface\n")
    assert wrong_imports(bad) == ["test_bad.py:1: support", "test_bad.py:2: tests.test_surface"]


def test_no_test_file_is_loaded_twice_in_this_session() -> None:
    assert sys.modules["tests.support"] is tests.support
    assert loaded_twice(sys.modules) == {}


def test_a_second_import_path_makes_a_second_module_object() -> None:
    """What the checks above prevent, shown: `support` and `tests.support` are two modules."""
    code = (f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(TESTS)!r}]\n"
            "import support, tests.support\n"
            "from tests.test_helpers_imported_once import loaded_twice\n"
            "print(support is tests.support, sorted(loaded_twice(sys.modules).values()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stdout.strip() == "False [['support', 'tests.support']]", done.stderr
