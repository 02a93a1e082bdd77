"""The type checker over the project, as CI runs it (`make typecheck`, pyproject.toml [tool.mypy]).

mypy checks every package and script directory named in its `files` setting: basic
checks everywhere, strict on normalizer/, spool/ and policy/. A type error anywhere fails
this test, so `make test` fails on it. The other tests show the check cannot pass
vacuously: every source file is checked, the strict flags bite on a strict package and
only there, and an ignore without its error code is itself an error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support import ROOT

CONFIG = ROOT / "pyproject.toml"
MYPY = tomllib.loads(CONFIG.read_text())["tool"]["mypy"]
BARE_IGNORE = "# type" + ": ignore"
"""Spelt in two pieces so that this file holds no bare ignore itself."""
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[a-z-]+(?:,\s*[a-z-]+)*\])?")


def _mypy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """mypy with this interpreter and the project's configuration, run from `cwd`."""
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(CONFIG), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def _sources() -> list[Path]:
    """The .py and .pyi (stub) files under the directories mypy is configured to check."""
    return sorted(p for d in MYPY["files"] for pattern in ("*.py", "*.pyi")
                  for p in (ROOT / d).rglob(pattern))


def test_the_project_type_checks() -> None:
    """mypy finds no error in any configured directory, and it checked every file there.

    The cache is the checkout's `.mypy_cache` (in .gitignore), as `make typecheck` uses it.
    """
    done = _mypy(cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    checked = re.search(r"Success: no issues found in (\d+) source files", done.stdout)
    assert checked, done.stdout + done.stderr
    assert int(checked[1]) == len(_sources())


def _package(root: Path, name: str, body: str) -> Path:
    """`name/wrong.py` holding `body` under `root` (a package, so the module is `name.wrong`)."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    (root / name / "wrong.py").write_text(body)
    return root / name / "wrong.py"


WRONG = f'''\
def untyped(x):
    return x


def answer() -> int:
    return "forty-two"


value: int = "one"  {BARE_IGNORE}
'''


STRICT = ("normalizer", "spool", "policy")
BASIC = ("runner", "blackbox")


def test_wrong_annotations_fail_strictly_in_a_strict_package_only(tmp_path: Path) -> None:
    """The project's configuration, on a temporary module that is wrong three ways.

    In a strict package every one is reported; in a basic one the missing annotations are
    allowed, the wrong return type and the ignore without a code are not.
    """
    paths = [_package(tmp_path, name, WRONG) for name in STRICT + BASIC]
    # a cache of its own (the temporary modules' names are the project's packages' names), kept
    # inside the checkout's ignored .mypy_cache so that a second run reuses the standard library's
    cache = ROOT / MYPY["cache_dir"] / "wrong-modules"
    done = _mypy("--cache-dir", str(cache), *(str(p.relative_to(tmp_path)) for p in paths), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    codes: dict[str, set[str]] = {name: set() for name in STRICT + BASIC}
    for package, code in re.findall(r"^(\w+)/wrong\.py:\d+: error: .*\[([a-z-]+)\]$", done.stdout, re.M):
        codes[package].add(code)
    for name in STRICT:
        assert codes[name] >= {"no-untyped-def", "return-value", "ignore-without-code"}, done.stdout
    for name in BASIC:
        assert "no-untyped-def" not in codes[name], done.stdout
        assert codes[name] >= {"return-value", "ignore-without-code"}, done.stdout


def _python_files() -> list[Path]:
    """Every .py file of the checkout (hidden directories such as .venv left out)."""
    found = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        found += [Path(top, f) for f in files if f.endswith(".py")]
    return sorted(found)


def test_every_type_ignore_names_its_error_code() -> None:
    """Tests included: mypy checks the configured directories, this every Python file."""
    files = _python_files()
    assert ROOT / "tests" / "test_typecheck.py" in files
    bare = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in files
            for n, line in enumerate(path.read_text().splitlines(), start=1)
            if (m := IGNORE.search(line)) and not m["code"]]
    assert bare == []
    seen = IGNORE.search(f"x = 1  {BARE_IGNORE}")
    assert seen and seen["code"] is None  # the pattern does see a bare ignore
