"""Shared test set-up. Kernel tests run the real runner against the real kernel.

They need root. Off CI, a non-root session skips them with the reason; on CI
(CI set) they always run, so a missing privilege fails instead of hiding.
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0 or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(reason="kernel tests need root (CI runs them as root)")
    for item in items:
        if "kernel" in item.keywords:
            item.add_marker(skip)
