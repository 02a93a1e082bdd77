"""Shared test set-up. Kernel tests run the real runner against the real kernel.

They need root. Off CI, a non-root session skips them with the reason; on CI
(`support.ON_CI`) they always run, so a missing privilege fails instead of
hiding. On CI every skip is a failure: CI installs every prerequisite
(`make setup`), so a test that would skip there hides a broken set-up.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import tests.sanitized  # noqa: F401  (first: the sanitized C pieces, when asked for, before any import of them)
from runner.capture.cgroup import PARENT_ENV
from runner.evidence.archive import read_archive
from runner.evidence.validate import validate_members
from tests.support import ASSAY_COMPAT, ON_CI, assay_compat

# A caller without HOME (CI, cron) makes every Python and bash the tests start
# look the user up in passwd, which on a host running nscd is a connect to its
# socket: a real endpoint in the evidence, but one that depends on the host.
os.environ.setdefault("HOME", pwd.getpwuid(os.getuid()).pw_dir)
# Runs started by this test process make their cgroups under a parent of its own: every run
# sweeps the cgroups of runners that died (runner/capture/stale.py), and a test must never
# sweep another session's, or another xdist worker's, or a concurrent job's on a shared host.
# An xdist worker inherits the controller's environment, parent included: it adds its own name.
os.environ.setdefault(PARENT_ENV, f"assay-runner-tests-{os.getpid()}")
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ[PARENT_ENV] += f"-{os.environ['PYTEST_XDIST_WORKER']}"

# The fuzz suites (tests/test_fuzz_*.py): a bounded, reproducible example count in CI
# (derandomized: the same examples every run, so a CI failure reproduces locally with
# HYPOTHESIS_PROFILE=ci); off CI the default profile explores new examples each run.
settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deep", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])  # bug hunting by hand
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if ON_CI else "dev"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0 or ON_CI:
        return
    skip = pytest.mark.skip(reason="kernel tests need root (CI runs them as root)")
    for item in items:
        if "kernel" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On CI a skipped test fails, naming why it would have skipped."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if ON_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped on CI, where make setup installs every prerequisite: {reason}"


def runner_written_archives(base: Path) -> list[Path]:
    """Archives the runner wrote under `base`: each `ID.tar.gz` next to its `ID.spool`."""
    return sorted(p for p in base.rglob("*.tar.gz") if p.with_suffix("").with_suffix(".spool").is_file())


@pytest.fixture(scope="session", autouse=True)
def own_cgroup_parent_removed() -> Iterator[None]:
    """After the session: what runners that died left in this process's cgroup parent, then the parent."""
    yield
    if os.geteuid() != 0:
        return
    from runner.capture.cgroup import parent_name
    from runner.capture.owner import records_dir
    from runner.capture.stale import parents, sweep

    sweep()
    for parent in parents():
        if parent.is_dir() and not any(p.is_dir() for p in parent.iterdir()):
            parent.rmdir()
    with contextlib.suppress(OSError):  # not empty: a run cgroup is still there, and its record stays
        records_dir(parent_name(), create=False).rmdir()


@pytest.fixture(scope="session", autouse=True)
def every_written_archive_is_conformant(tmp_path_factory: pytest.TempPathFactory):
    """After the session: every archive the runner wrote for any test passes the project's
    conformance check and, as a cross-check, `assay_compat.py` (one call for all)."""
    yield
    archives = runner_written_archives(tmp_path_factory.getbasetemp())
    if not archives:
        return
    problems = [f"{a}: {p}" for a in archives for p in validate_members(read_archive(a))]
    assert problems == [], "\n".join(problems[:20])
    if not ASSAY_COMPAT.is_file() and not ON_CI:
        return  # off CI without ../shared: the project's own check above still ran
    proc = assay_compat(*archives)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
