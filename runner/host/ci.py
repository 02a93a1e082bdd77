"""Whether this process runs under continuous integration: the one test of it.

CI services export `CI=true` (and `.ci/run` does); the runner labels an
observed session `ci` then, and the test suite turns every skip into a
failure. Both read it here, so `CI=false` or `CI=0` means the same to both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

TRUE_VALUES = frozenset({"1", "true", "yes"})


def on_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """`CI` holds a true value (1, true or yes, in any case, around spaces)."""
    return environ.get("CI", "").strip().lower() in TRUE_VALUES
