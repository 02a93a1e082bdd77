"""Loading a C extension that `make setup` builds beside its source (scripts/build_native.sh).

Each C piece (spool._framescan, normalizer._fastscan) has a Python twin
with the same output, so a piece that is not used goes unnoticed but for
the clock; one built before its source changed may no longer match its
twin, so it is not used either: `make setup` rebuilds it. Either way the
reason is kept for `python -m runner.host.native` and doctor to print.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType


def load(module: str, source: Path) -> tuple[ModuleType | None, str]:
    """The built `module` and "", or None and why it is not used: it does not import, or it is older
    than `source` (an installation without the source, a wheel, has nothing to compare with)."""
    try:
        built = importlib.import_module(module)
    except ImportError as exc:  # not built: the pure-Python path, same output
        return None, f"{module} does not import (not built?): {exc}"
    path = Path(built.__file__ or "")
    if source.exists() and path.stat().st_mtime < source.stat().st_mtime:
        return None, f"{path} is older than its source {source}"
    return built, ""
