"""Direct mode ends a run whose ring read failed with one line, never a traceback or an archive.

The read itself failing on a real ring is tests/test_ring_errors_kernel.py; here the run's
source (runner/capture/sources.py `LocalSource`) gets an observer whose reads fail as libbpf's
would, and must turn that into the runner's one-line error (exit 125, no archive).
"""

from __future__ import annotations

import errno

import pytest

from ebpf.loader import RingError
from runner.capture.sources import LocalSource
from runner.errors import RunnerError


class FailingObserver:
    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        raise RingError(errno.EBADF, "reading the ring buffer (poll): Bad file descriptor")

    def drain(self) -> None:
        raise RingError(errno.EIO, "reading the ring buffer (consume): Input/output error")


@pytest.mark.parametrize("read", ["wait", "drain", "finish"])
def test_a_failed_ring_read_ends_the_run_with_one_line(read: str) -> None:
    source = LocalSource.__new__(LocalSource)  # no monitor: only the reads are under test
    source._observer = FailingObserver()  # type: ignore[assignment]  # a stand-in observer
    with pytest.raises(RunnerError) as raised:
        getattr(source, read)(*([10] if read == "wait" else []))
    message = str(raised.value)
    assert "\n" not in message and message.startswith("cannot read the eBPF ring buffer: ")
    assert message.endswith("no archive is written")
    assert raised.value.exit_code == 125
