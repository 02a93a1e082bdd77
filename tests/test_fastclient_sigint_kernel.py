"""Ctrl-C while the fast client's request is still going out ends the real daemon's run as `sigint`.

From the request's first byte the daemon has a run; a client that died of
that Ctrl-C mid-request would leave the run `client_disconnected`. The
daemon's server is stopped (SIGSTOP: it is this test's own daemon) so the
request, larger than the socket buffer, cannot all go out; the client is
interrupted while blocked sending; the daemon continues. The run's spool must
say it was ended by SIGINT (the daemon's server hands the connection to the
worker without the Interrupt that followed the request: runner/daemon/protocol.py
`FrameReader`), and the client exit 130, or 125 when the run ended before the
command's first exec was recorded (then no archive may be written).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time

import pytest

from spool.format import read_spool
from tests.daemon_support import daemon, shared_tmp
from tests.fastclient_support import blocked_sending
from tests.sanitized import FAST_CLIENT
from tests.support import Archive

pytestmark = pytest.mark.kernel


def test_ctrl_c_while_sending_ends_the_run_as_sigint() -> None:
    root = shared_tmp()
    try:
        with daemon(root, "") as service:
            work = root / "work"
            work.mkdir()
            run_id = f"sigint-{secrets.token_hex(4)}"
            # 3 x 80,000 bytes: more than the socket buffer, less than the request's 256 KiB bound
            env = {**os.environ, **{f"ASSAY_EDGE_FILL_{i}": "x" * 80_000 for i in range(3)}}
            os.kill(service.proc.pid, signal.SIGSTOP)
            try:
                client = subprocess.Popen([str(FAST_CLIENT), "run", "--socket", str(service.socket), "--out",
                                           str(work / "out"), "--run-id", run_id, "--", "sleep", "600.1"],
                                          cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
                deadline = time.monotonic() + 60  # readiness: it blocks within milliseconds
                while (not blocked_sending(client.pid) and client.poll() is None
                       and time.monotonic() < deadline):
                    os.sched_yield()
                assert blocked_sending(client.pid), "the client never blocked sending its request"
                client.send_signal(signal.SIGINT)
            finally:
                os.kill(service.proc.pid, signal.SIGCONT)
            _, err = client.communicate(timeout=120)
            # The daemon recorded the Ctrl-C, not a vanished client (the spool is delivered either way).
            assert read_spool(work / "out" / f"{run_id}.spool").trailer.ended_by == "sigint", \
                err + service.logs()[-4000:]
            if client.returncode == 125:
                # The interrupt waited in the socket from the start, so the run can be ended before
                # the command's first exec was recorded: then no archive may be written, and the
                # client says why (docs/artifacts.md, cgroup_correlation=failed).
                assert "cgroup_correlation 'failed' is refused by Assay" in err, err
                assert not (work / "out" / f"{run_id}.tar.gz").exists()
            else:
                assert client.returncode == 130, err
                notes = Archive(work / "out" / f"{run_id}.tar.gz").health["notes"]
                assert any(n.startswith("s2_run_ended: reason=sigint") for n in notes), notes
    finally:
        shutil.rmtree(root, ignore_errors=True)
