"""Direct mode loads its monitor in a thread while start-up goes on (runner/capture/sources.py
`LocalSensor.preload`): a run takes it, a run that ends first unloads it, a failed load is the
run's error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.capture.cgroup import RunCgroup
from runner.capture.sources import LocalSensor
from runner.errors import RunnerError

pytestmark = pytest.mark.kernel


def _program_fds() -> set[str]:
    fds = Path("/proc/self/fd")
    out = set()
    for fd in fds.iterdir():
        try:
            if os.readlink(fd) == "anon_inode:bpf-prog":
                out.add(fd.name)
        except OSError:
            continue  # the fd of the listing itself
    return out


def test_a_preloaded_monitor_no_run_took_is_unloaded() -> None:
    before = _program_fds()
    sensor = LocalSensor(1).preload()
    sensor.discard()
    assert _program_fds() == before
    sensor.discard()  # twice is fine


def test_a_run_takes_the_preloaded_monitor() -> None:
    before = _program_fds()
    sensor = LocalSensor(1).preload()
    cgroup = RunCgroup.create("preload-test")
    try:
        source = sensor.open(cgroup, None)
        try:
            assert _program_fds() - before  # loaded and held by the run's source
            sensor.discard()  # the run owns it now: discard leaves it alone
            assert _program_fds() - before
        finally:
            source.close()
    finally:
        cgroup.remove()
    assert _program_fds() == before


def test_a_failed_preload_is_the_run_s_error() -> None:
    sensor = LocalSensor(3).preload()  # not a power of two: the monitor refuses it
    cgroup = RunCgroup.create("preload-fail")
    try:
        with pytest.raises(RunnerError, match="power of two"):
            sensor.open(cgroup, None)
    finally:
        cgroup.remove()
