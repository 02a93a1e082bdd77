"""`make test-asan` tests what it says: the sanitized builds are the ones in use, and a finding fails.

The first tests check that the accelerator, the frame reader, the ring consumer
and the fast client the suites use are the sanitized builds under `make test-asan`
(scripts/test_asan.sh, `ASSAY_NATIVE_SANITIZED` set) and the checkout's
otherwise. The last ones: a copy of the sources with a planted heap overflow and a planted
signed overflow, built by `build_native.sh --sanitize` and loaded with the
environment `scripts/test_asan.sh --env` gives, must abort with a report each.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ebpf import ringsink
from normalizer import accel
from spool import accel as spool_accel
from tests import sanitized
from tests.support import ROOT

SOURCES = ("scripts/build_native.sh", "scripts/test_asan.sh", "ebpf/ringsink.c", "normalizer/fastscan.c",
           "spool/framescan.c", "runner/daemon/fastclient.c")


def _home(extension: ModuleType) -> Path:
    """The directory an extension module was loaded from."""
    assert extension.__file__ is not None, extension
    return Path(extension.__file__).parent


def test_the_suites_use_the_builds_the_environment_names() -> None:
    """The sanitized tree's pieces under make test-asan, the checkout's otherwise; never a mix."""
    assert accel.native is not None and spool_accel.native is not None
    assert ringsink.available()
    maps = Path("/proc/self/maps").read_text()
    asan_runtime = b"__asan_init" in sanitized.FAST_CLIENT.read_bytes()
    if sanitized.TREE is None:
        assert _home(accel.native) == ROOT / "normalizer"
        assert _home(spool_accel.native) == ROOT / "spool"
        assert ringsink.LIBRARY == ROOT / "ebpf" / "_ringsink.so"
        assert Path(sys.executable).with_name("assay-runner") == sanitized.FAST_CLIENT
        assert "libasan" not in maps and not asan_runtime
    else:
        assert _home(accel.native) == sanitized.TREE
        assert _home(spool_accel.native) == sanitized.TREE
        assert ringsink.LIBRARY.parent == sanitized.TREE
        assert sanitized.FAST_CLIENT.parent == sanitized.TREE / "bin"
        assert "libasan" in maps and asan_runtime
        assert "LD_PRELOAD" not in os.environ  # the tests' children load no sanitizer runtime


def test_the_ring_consumer_in_use_takes_records() -> None:
    """One call through the library in use: under make test-asan, a broken preload shows here."""
    sink = ringsink.RingSink()
    try:
        sink.open_run(7, ringsink.FRAMES)
        record = bytearray(64)
        record[22:24] = (7).to_bytes(2, "little")
        buf = ctypes.create_string_buffer(bytes(record))
        assert sink.callback(sink.handle, ctypes.addressof(buf), len(record)) == 0
        assert sink.take(7) == (len(record).to_bytes(4, "little") + bytes(record), 1)
        assert str(ringsink.LIBRARY) in Path("/proc/self/maps").read_text()
    finally:
        sink.free()


PLANTED = {
    "heap-buffer-overflow": ("struct ringsink *s = calloc(1, sizeof(*s));",
                             "struct ringsink *s = calloc(1, sizeof(*s) - sizeof(uint64_t));",
                             "lib.ringsink_lost(s)"),
    "signed integer overflow": ("s->paused = 0;", "s->paused = INT32_MAX; s->paused++;",
                                "lib.ringsink_unpause(s)"),
}
"""Each finding: the line of ebpf/ringsink.c it replaces, its replacement, and the call that reaches it."""


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sanitized build (`build_native.sh --sanitize`) of sources with every finding planted."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc (make setup installs it)")  # a failure on CI (conftest.py)
    base = tmp_path_factory.mktemp("planted")
    root = base / "src"
    for name in SOURCES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    source = root / "ebpf" / "ringsink.c"
    text = source.read_text()
    for original, replacement, _ in PLANTED.values():
        assert original in text
        text = text.replace(original, replacement)
    source.write_text(text)
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    (venv / "assay-runner-py").write_text("#!/bin/sh\n")
    (venv / "assay-runner-py").chmod(0o755)
    built = subprocess.run(["bash", str(root / "scripts/build_native.sh"), "--sanitize", str(base / "asan")],
                           capture_output=True, text=True, check=False, timeout=300)
    assert built.returncode == 0, built.stderr
    return base


@pytest.mark.parametrize("finding", sorted(PLANTED))
def test_a_planted_finding_aborts_with_its_report(planted: Path, finding: str) -> None:
    logs = planted / f"reports-{finding.replace(' ', '-')}"
    logs.mkdir()
    printed = subprocess.run(["bash", str(planted / "src/scripts/test_asan.sh"), "--env", str(logs)],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    env = {**os.environ, **dict(line.split("=", 1) for line in printed.splitlines())}
    program = (f"import ctypes; lib = ctypes.CDLL({str(planted / 'asan/_ringsink.so')!r}); "
               f"lib.ringsink_new.restype = ctypes.c_void_p; s = ctypes.c_void_p(lib.ringsink_new(1 << 20)); "
               f"{PLANTED[finding][2]}; print('survived')")
    proc = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == -signal.SIGABRT and "survived" not in proc.stdout, proc.stdout + proc.stderr
    reports = "".join(p.read_text() for p in logs.iterdir()) + proc.stderr  # UBSan writes to stderr only
    assert finding in reports, reports
