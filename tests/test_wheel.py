"""A plain wheel install (`pip install .`, not editable) carries the data the code reads.

The wheel is built from a copy of the checkout (the checkout gets no build/
or egg-info) with this venv's setuptools, no build isolation and no network,
and installed with `--no-deps` into a fresh venv. The dependencies come from
this venv's site-packages, added as a plain path: its editable finder is not
installed there, so `normalizer` and `runner` can only come from the wheel
(the test checks they do). Then, from a directory outside the checkout,
`assay-runner-py validate` applies Assay's kernel line schema to the golden
archives and the redactor applies Assay's secret rules: both read
`normalizer/upstream/` as package data.
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_validate import KERNEL, golden, set_line

from policy.load import PRESETS
from tests.support import ROOT

COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.so", "build", "*.egg-info", "runs",
                                     ".pytest_cache", ".ruff_cache", ".hypothesis", "tests", "bench",
                                     "golden")
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
"""A GitHub-token-shaped string (not a real token): rule `github-token` of secret-rules.v1.json."""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A venv holding assay-runner from a wheel; yields its bin directory."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=COPY_IGNORE, symlinks=True)
    wheels = tmp / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
                           capture_output=True, text=True, check=False, timeout=600, stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("assay_runner-*.whl")
    venv = tmp / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True,
                          text=True, check=False, timeout=120)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    done = subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, check=False, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (Path(purelib) / "assay-runner-test-deps.pth").write_text("".join(f"{d}\n" for d in deps))
    yield venv / "bin"


def run(bindir: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bindir / argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=300, stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})


def test_the_packages_come_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    proc = run(installed, tmp_path, "python", "-c",
               "import normalizer, runner; print(normalizer.__file__); print(runner.__file__)")
    assert proc.returncode == 0, proc.stderr
    for line in proc.stdout.splitlines():
        assert Path(line).is_relative_to(installed.parent), line
        assert not Path(line).is_relative_to(ROOT), line


@pytest.mark.parametrize("name", ["archive-minimal", "archive-sdk-policy"])
def test_validate_applies_the_upstream_schema_from_the_wheel(installed: Path, tmp_path: Path,
                                                              name: str) -> None:
    proc = run(installed, tmp_path, "assay-runner-py", "validate", "--json", str(ROOT / "golden" / name))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["valid"] and report["problems"] == [] and report["members"] >= 7, report


def test_a_line_upstreams_schema_refuses_fails_validate_from_the_wheel(installed: Path,
                                                                       tmp_path: Path) -> None:
    """The schema is really applied: `status` without `return_value` (test_validate.py's case)."""
    archive = tmp_path / "broken"
    for member, data in set_line(KERNEL, 1, status="success")(golden()).items():
        (archive / member).parent.mkdir(parents=True, exist_ok=True)
        (archive / member).write_bytes(data)
    proc = run(installed, tmp_path, "assay-runner-py", "validate", "--json", str(archive))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["problems"] == [{
        "member": KERNEL, "line": 2,
        "message": "line schema: 'return_value' is a required property - at `$` "
                   "(schema allOf/5/then/required)"}]


def test_redaction_uses_the_upstream_rules_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    proc = run(installed, tmp_path, "python", "-c",
               "import sys; from normalizer.redact import RULES_FILE, Redactor; "
               "print(RULES_FILE); print(Redactor().redact(sys.argv[1]))", f"token {SECRET} end")
    assert proc.returncode == 0, proc.stderr
    rules, redacted = proc.stdout.splitlines()
    assert Path(rules).is_relative_to(installed.parent), rules
    assert redacted.startswith("token <redacted:github-token:") and redacted.endswith("> end"), redacted
    assert SECRET not in redacted


def test_the_other_package_data_is_in_the_wheel(installed: Path, tmp_path: Path) -> None:
    """The BPF sources BCC compiles at run time and the policy presets."""
    proc = run(installed, tmp_path, "python", "-c",
               "from ebpf.monitor import SOURCE_DIR; from policy.load import PRESETS, load_preset; "
               "print(sorted(p.name for p in SOURCE_DIR.iterdir() if p.suffix in ('.c', '.h'))); "
               "print(SOURCE_DIR); print([load_preset(n).name for n in PRESETS])")
    assert proc.returncode == 0, proc.stderr
    sources, where, presets = proc.stdout.splitlines()
    assert sources == str(sorted(p.name for p in (ROOT / "ebpf").iterdir() if p.suffix in (".c", ".h")))
    assert Path(where).is_relative_to(installed.parent), where
    assert presets == str(list(PRESETS)), presets



@pytest.mark.parametrize("argv", [["probe", "--matrix"], ["assay-runner-py", "acceptance"]])
def test_commands_that_need_the_checkout_say_so_in_one_line(installed: Path, tmp_path: Path,
                                                            argv: list[str]) -> None:
    """The probes, catalogs and fixtures are the checkout's, not the wheel's: one line says so."""
    proc = run(installed, tmp_path, *argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "needs an assay-runner checkout" in line and "make setup" in line, line
    assert str(installed.parent) in line  # where it looked
    assert run(installed, tmp_path, "assay-runner-py", "acceptance", "list").returncode == 0
