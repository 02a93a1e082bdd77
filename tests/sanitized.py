"""The sanitized C pieces in place of the checkout's, when `ASSAY_NATIVE_SANITIZED` names their tree.

`make test-asan` builds the ring consumer, the normalizer accelerator, the
spool frame reader and the fast client with AddressSanitizer and UndefinedBehaviorSanitizer into a tree
of their own (`scripts/build_native.sh --sanitize DIR`) and runs their twin,
fuzz and Hypothesis suites with `ASSAY_NATIVE_SANITIZED=DIR`, libasan
preloaded into pytest's Python, and every finding fatal (docs/setup.md,
"Sanitized C"). conftest.py imports this module before anything imports the
normalizer, so:

- `normalizer._fastscan` is DIR's build (`normalizer.accel.native`);
- `spool._framescan` is DIR's build (`spool.accel.native`);
- `ebpf.ringsink.LIBRARY` is DIR's `_ringsink.so`;
- `FAST_CLIENT` is DIR's `bin/assay-runner` (tests/test_fastclient.py runs it).

Each must exist and be at least as new as its source, else the session stops:
a sanitized run that silently tested the plain builds would prove nothing.
The preload is dropped from the environment the tests' subprocesses inherit:
only this process loads sanitized libraries, and the fast client is an
executable linked with its own sanitizer runtime.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "ASSAY_NATIVE_SANITIZED"
TREE = Path(os.environ[ENV]).resolve() if os.environ.get(ENV) else None
"""The sanitized build's tree, or None: the checkout's pieces are the ones tested."""
FAST_CLIENT = (TREE / "bin" if TREE else Path(sys.executable).parent) / "assay-runner"
"""The fast client the tests run."""


def _fresh(built: Path, source: Path) -> Path:
    if not built.is_file() or built.stat().st_mtime < source.stat().st_mtime:
        raise SystemExit(f"{ENV}: {built} is missing or older than {source}: "
                         f"run scripts/build_native.sh --sanitize {TREE}")
    return built


def _extension(tree: Path, name: str, source: Path) -> None:
    """Import DIR's build of extension module `name` (package.module) under that name."""
    if name in sys.modules:
        raise SystemExit(f"{ENV}: {name} was imported before tests/sanitized.py")
    built = _fresh(tree / f"{name.rpartition('.')[2]}{sysconfig.get_config_var('EXT_SUFFIX')}", source)
    loader = importlib.machinery.ExtensionFileLoader(name, str(built))
    spec = importlib.util.spec_from_file_location(name, built, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module


def _install(tree: Path) -> None:
    """Make the sanitized builds the ones every test uses (before any import of them)."""
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        raise SystemExit(f"{ENV}: libasan is not preloaded (make test-asan sets LD_PRELOAD)")
    os.environ.pop("LD_PRELOAD")
    _extension(tree, "normalizer._fastscan", ROOT / "normalizer" / "fastscan.c")
    _extension(tree, "spool._framescan", ROOT / "spool" / "framescan.c")

    from ebpf import ringsink
    ringsink.LIBRARY = _fresh(tree / "_ringsink.so", ringsink.SOURCE)
    _fresh(FAST_CLIENT, ROOT / "runner" / "daemon" / "fastclient.c")


if TREE is not None:
    _install(TREE)
