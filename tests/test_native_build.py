"""The C pieces' build (scripts/build_native.sh) and the check that they are in use (runner.host.native).

The script runs on a copy of the sources with a venv of its own, so the
checkout's pieces and venv are never touched. What is missing (gcc, the C
library headers, Python.h) is simulated with a PATH or a venv python that
lacks it: the script must stop with exit 1 and one line saying what to install.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ebpf import ringsink
from runner.host import native
from tests.support import ROOT

SOURCES = ("scripts/build_native.sh", "ebpf/ringsink.c", "normalizer/fastscan.c", "spool/framescan.c",
           "runner/daemon/fastclient.c")
TOOLS = ("bash", "dirname", "mktemp", "rm", "head", "tail", "mv")
"""What the script runs besides gcc and the venv's python."""


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the sources, and a venv whose python is this one and whose Python CLI is a stub."""
    root = tmp_path / "src"
    for name in SOURCES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    bindir = root / ".venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").symlink_to(sys.executable)
    executable(bindir / "assay-runner-py", "#!/bin/sh\necho python-cli \"$@\"\n")
    executable(bindir / "assay-runner", "#!/bin/sh\n# what pip writes: a Python script\n")
    return root


def build(root: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path} if path else None
    return subprocess.run(["bash", str(root / "scripts" / "build_native.sh")], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, check=False, timeout=300)


def path_without_gcc(tmp_path: Path, gcc: str | None = None) -> str:
    """A PATH holding only the script's tools, and `gcc` when given (a script)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    if gcc is not None:
        executable(bindir / "gcc", gcc)
    return str(bindir)


def built(root: Path) -> dict[str, int]:
    """The pieces in the tree, by path, with their modification times."""
    found = [root / "ebpf" / "_ringsink.so", *root.glob("normalizer/_fastscan*.so"),
             *root.glob("spool/_framescan*.so"), root / ".venv/bin/assay-runner"]
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in found}


def test_builds_the_four_pieces_then_only_what_changed(tree: Path) -> None:
    first = build(tree)
    assert first.returncode == 0, first.stderr
    assert [line.split(":")[1].strip() for line in first.stdout.splitlines()] == [
        "ring consumer", "normalizer accelerator", "spool frame reader", "fast client"]
    assert all(": built " in line for line in first.stdout.splitlines()), first.stdout
    before = built(tree)
    assert len(before) == 4, before
    assert (tree / ".venv/bin/assay-runner").read_bytes()[:4] == native.ELF
    # The fast client hands a non-run command to the Python CLI beside it.
    handed = subprocess.run([str(tree / ".venv/bin/assay-runner"), "doctor"], capture_output=True, text=True,
                            check=False)
    assert handed.stdout == "python-cli doctor\n", handed.stdout + handed.stderr

    again = build(tree)  # idempotent: nothing rebuilt
    assert again.returncode == 0, again.stderr
    assert all(": already built (" in line for line in again.stdout.splitlines()), again.stdout
    assert built(tree) == before

    source = tree / "ebpf" / "ringsink.c"
    os.utime(source, ns=(source.stat().st_atime_ns, before["ebpf/_ringsink.so"] + 1_000_000_000))
    executable(tree / ".venv/bin/assay-runner", "#!/bin/sh\n# pip put its script back\n")
    third = build(tree)
    assert third.returncode == 0, third.stderr
    lines = third.stdout.splitlines()
    assert [": built " in line for line in lines] == [True, False, False, True], third.stdout
    assert not list(tree.rglob("*.tmp"))


def test_missing_gcc_says_what_to_install(tree: Path, tmp_path: Path) -> None:
    proc = build(tree, path_without_gcc(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr == ("native: error: gcc not found: apt-get install gcc libc6-dev "
                           "(or 'sudo make setup')\n")
    assert not (tree / "ebpf" / "_ringsink.so").exists()


def test_missing_c_headers_say_what_to_install(tree: Path, tmp_path: Path) -> None:
    """A gcc whose preprocessor finds no <stdint.h> (gcc without libc6-dev)."""
    gcc = "#!/bin/sh\necho 'fatal error: stdint.h: No such file or directory' >&2\nexit 1\n"
    proc = build(tree, path_without_gcc(tmp_path, gcc))
    assert proc.returncode == 1
    assert proc.stderr == ("native: error: the C library headers are missing (gcc cannot find stdint.h): "
                           "apt-get install libc6-dev\n")


def test_missing_python_headers_say_what_to_install(tree: Path) -> None:
    """A Python whose include directory has no Python.h (python3 without python3-dev)."""
    python = tree / ".venv" / "bin" / "python"
    python.unlink()
    executable(python, f"#!/bin/sh\necho .cpython-311-x86_64-linux-gnu.so {tree}/no-include\n")
    proc = build(tree)
    assert proc.returncode == 1
    assert proc.stdout == "native: ring consumer: built ebpf/_ringsink.so\n"
    assert proc.stderr == (f"native: error: Python.h not found in {tree}/no-include: "
                           "apt-get install python3-dev\n")
    assert not list(tree.glob("normalizer/_fastscan*")) and not list(tree.glob("spool/_framescan*"))


def test_a_compile_error_stops_the_build(tree: Path) -> None:
    (tree / "ebpf" / "ringsink.c").write_text("int broken(void) { return }\n")
    proc = build(tree)
    assert proc.returncode == 1
    assert proc.stderr.endswith(
        "native: error: gcc could not build the ring consumer (ebpf/_ringsink.so; output above)\n"
    ), proc.stderr
    assert "error: expected expression" in proc.stderr
    assert not list((tree / "ebpf").glob("_ringsink.so*"))


def test_this_checkout_uses_every_piece() -> None:
    """`make setup` built them: the runner here takes every fast path."""
    proc = subprocess.run([sys.executable, "-m", "runner.host.native"], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line.split()[:2] for line in proc.stdout.splitlines()] == [
        ["ok", "ringsink"], ["ok", "fastscan"], ["ok", "framescan"], ["ok", "fastclient"]]


def test_a_missing_or_broken_ring_consumer_is_reported(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "_ringsink.so"
    monkeypatch.setattr(ringsink, "LIBRARY", missing)
    assert not native.ring_consumer().ok
    missing.write_bytes(b"not a shared object")  # newer than its source, but does not load
    piece = native.ring_consumer()
    assert not piece.ok and "does not load" in piece.detail, piece


def test_pips_script_is_not_the_fast_client(tree: Path) -> None:
    piece = native.fast_client(tree / ".venv" / "bin")
    assert not piece.ok and "is not the C client" in piece.detail, piece
    (tree / ".venv" / "bin" / "assay-runner").unlink()
    piece = native.fast_client(tree / ".venv" / "bin")
    assert not piece.ok and "No such file" in piece.detail, piece


PYTHON_PIECES = {"fastscan": (native.accel, native.accelerator),
                 "framescan": (native.spool_accel, native.frame_reader)}
"""The C extensions with a Python twin: their accel module (native, refused, SOURCE) and their check."""


@pytest.mark.parametrize("piece", sorted(PYTHON_PIECES))
def test_a_missing_or_refused_extension_is_reported(monkeypatch: pytest.MonkeyPatch, piece: str) -> None:
    module, check = PYTHON_PIECES[piece]
    monkeypatch.setattr(module, "native", None)
    monkeypatch.setattr(module, "refused", f"_{piece} does not import (not built?): gone")
    found = check()
    assert not found.ok and "does not import" in found.detail, found
    monkeypatch.setattr(module, "refused", f"_{piece}.so is older than its source {piece}.c")
    found = check()
    assert not found.ok and "older than its source" in found.detail, found


@pytest.mark.parametrize("piece", sorted(PYTHON_PIECES))
def test_an_extension_older_than_its_source_is_not_used(tmp_path: Path, piece: str) -> None:
    """As the ring consumer: C built before its source changed may no longer match its Python twin."""
    module = PYTHON_PIECES[piece][0]
    assert module.native is not None, f"{piece} is not built: make setup"
    package = module.__name__.split(".")[0]
    built = Path(module.native.__file__)
    for path in (ROOT / "spool" / "__init__.py", ROOT / "spool" / "native.py",  # the loader
                 ROOT / package / "__init__.py", ROOT / package / "accel.py", built, module.SOURCE):
        (tmp_path / path.parent.name).mkdir(exist_ok=True)
        shutil.copy2(path, tmp_path / path.parent.name / path.name)
    copy, source = tmp_path / package / built.name, tmp_path / package / module.SOURCE.name

    def loaded(code: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        return subprocess.run([sys.executable, "-c", f"from {package} import accel; {code}"], env=env,
                              capture_output=True, text=True, check=True, cwd=tmp_path).stdout

    so_mtime = copy.stat().st_mtime
    os.utime(source, (so_mtime - 10, so_mtime - 10))
    assert loaded("print(accel.native is not None, accel.refused)") == "True \n"
    os.utime(source, (so_mtime + 10, so_mtime + 10))
    assert loaded("print(accel.native is not None, accel.refused)") == \
        f"False {copy} is older than its source {source}\n"
    source.unlink()  # an installation without the source: nothing to compare
    assert str(copy) in loaded("print(accel.native)")
