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
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pluggy
import pytest
from hypothesis import HealthCheck, settings

import tests.sanitized  # noqa: F401  (first: the sanitized C pieces, when asked for, before any import of them)
from runner.capture.cgroup import PARENT_ENV
from tests.archive_watch import ArchiveWatch
from tests.support import ON_CI

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
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    """On CI a skipped test fails, naming why it would have skipped."""
    outcome = yield
    report = outcome.get_result()
    _skip_fails_on_ci(report)
    if call.when == "setup":
        item.stash[FIXTURE_VALUES] = list(getattr(item, "funcargs", {}).values())
    elif call.when == "teardown":
        values: list[object] = item.stash.get(FIXTURE_VALUES, [])
        found = item.config.stash[WATCH].end(values)
        text = "archives written by this test do not conform:\n" + "\n".join(found[:20])
        if found and report.passed:
            report.outcome = "failed"
            report.longrepr = text
        elif found:  # the teardown failed already: its error stays, and this is shown with it
            report.sections.append(("archive conformance", text))


FIXTURE_VALUES = pytest.StashKey[list[object]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector
                               ) -> Generator[None, pluggy.Result[pytest.CollectReport], None]:
    """On CI a module that skips itself while collected (a module-level `importorskip`) fails too."""
    outcome = yield
    _skip_fails_on_ci(outcome.get_result())


def _skip_fails_on_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    if ON_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped on CI, where make setup installs every prerequisite: {reason}"


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


WATCH = pytest.StashKey[ArchiveWatch]()


def pytest_configure(config: pytest.Config) -> None:
    fd, name = tempfile.mkstemp(prefix="assay-runner-tests-clock-")
    os.close(fd)
    clock = Path(name)
    config.stash[WATCH] = ArchiveWatch(clock)
    config.add_cleanup(clock.unlink)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.config.stash[WATCH].begin(item.nodeid)
    yield


@pytest.fixture(scope="session", autouse=True)
def every_written_archive_is_conformant(tmp_path_factory: pytest.TempPathFactory,
                                        pytestconfig: pytest.Config) -> Iterator[None]:
    """Each test's archives are checked after it (tests/archive_watch.py); after the session,
    the archives no test's own check saw, each problem naming the test that wrote it."""
    watch = pytestconfig.stash[WATCH]
    watch.base = tmp_path_factory.getbasetemp()
    yield
    leftover = watch.leftover()
    assert leftover == [], "\n".join(leftover[:20])
