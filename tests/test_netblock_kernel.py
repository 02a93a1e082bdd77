"""Blocked connects under concurrent opens: every denial is recorded once, whole, as itself.

The connect/sendmsg programs (ebpf/netpolicy.c) run preemptible, the syscall
tracepoint programs do not share their record with them: a denial's record is
built on its own program's stack. Here one thread of a run makes numbered
blocked connects (each to its own port) while other threads of the same run
open files as fast as they can on both CPUs, and the ring must hold exactly
one `net_block` record per connect, each with its own port, address, hook
and return value, and no open record holding a connect's address. (Where the
kernel preempts only voluntarily, as on the development host, the shared slot
was never overwritten in practice: there the test pins the stack record's
bytes; on a fully preemptible kernel it also catches a shared slot.)
"""

from __future__ import annotations

import socket
import struct
import subprocess
from pathlib import Path

import pytest

from ebpf.monitor import RUN_KEY, Monitor, MonitorConfig, NetPolicySpec
from ebpf.wire import HEADER, HOOK_CONNECT, HOOK_NET_BLOCK
from runner.capture.cgroup import RunCgroup

pytestmark = pytest.mark.kernel

CONNECTS = 20_000
BASE_PORT = 20_000
PROGRAM = r"""
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
/* netblock PROCS N BASE THREADS: join the cgroup, start THREADS openers, make N connects to
 * 127.0.0.1:BASE+i (each must fail with EPERM), stop the openers. */
static volatile int done;
static void *opener(void *arg)
{
    (void)arg;
    while (!done) {
        int fd = open("/nonexistent-netblock-test", O_RDONLY);
        if (fd >= 0) close(fd);
    }
    return NULL;
}
int main(int argc, char **argv)
{
    if (argc != 5) return 2;
    FILE *procs = fopen(argv[1], "w");
    if (!procs || fprintf(procs, "%d\n", (int)getpid()) < 0 || fclose(procs) != 0) return 3;
    long n = atol(argv[2]), base = atol(argv[3]), threads = atol(argv[4]);
    pthread_t t[16];
    for (long i = 0; i < threads && i < 16; i++)
        if (pthread_create(&t[i], NULL, opener, NULL) != 0) return 4;
    for (long i = 0; i < n; i++) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        sa.sin_port = htons((unsigned short)(base + i % 40000));
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) return 5;
        if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0 || errno != EPERM) return 6;
        close(s);
    }
    done = 1;
    for (long i = 0; i < threads && i < 16; i++)
        pthread_join(t[i], NULL);
    return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("netblock") / "netblock.c"
    src.write_text(PROGRAM)
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-pthread", "-o", str(src.with_suffix("")), str(src)],
                   check=True, timeout=120)
    return src.with_suffix("")


def test_every_blocked_connect_is_one_whole_record_under_concurrent_opens(program: Path) -> None:
    cgroup = RunCgroup.create("netblock-test")
    records: list[bytes] = []
    monitor = Monitor(MonitorConfig(ringbuf_pages=8192), records.append)
    child: subprocess.Popen[bytes] | None = None
    try:
        monitor.add_run(RUN_KEY, cgroup.id, NetPolicySpec(rules=(), default_allow=False))
        monitor.attach_net(cgroup.path)
        child = subprocess.Popen([str(program), str(cgroup.path / "cgroup.procs"), str(CONNECTS),
                                  str(BASE_PORT), "3"])
        while child.poll() is None:
            monitor.wait(20)
            monitor.drain()
        monitor.drain()
        counters = monitor.counters(RUN_KEY)
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        monitor.close()
        cgroup.remove()
    assert child.returncode == 0  # started: the try above ran through
    assert counters.drops["net_block"] == 0, "the ring overflowed: the check below would not be exact"

    blocks = [r for r in records if HEADER.unpack_from(r)[3] == HOOK_NET_BLOCK]
    loopback = socket.inet_aton("127.0.0.1")
    ports = []
    for record in blocks:
        _ts, tgid, tid, _hook, data_len, truncated, run, ret, a0, a1, _a2, _a3 = HEADER.unpack_from(record)
        data = record[HEADER.size:]
        assert (tgid, tid, data_len, truncated, run, ret, a0, a1) == (
            child.pid, child.pid, 16, 0, RUN_KEY, -1, HOOK_CONNECT, socket.IPPROTO_TCP), record.hex()
        family, port = struct.unpack_from("<H", data)[0], struct.unpack_from(">H", data, 2)[0]
        assert (len(data), family, data[4:8], data[8:]) == (16, socket.AF_INET, loopback, bytes(8)), \
            record.hex()
        ports.append(port)
    assert ports == [BASE_PORT + i % 40_000 for i in range(CONNECTS)]
    # no other record carries a connect's sockaddr (a denial written over an open's scratch)
    image = struct.pack("<H", socket.AF_INET)
    others = [r for r in records if HEADER.unpack_from(r)[3] not in (HOOK_NET_BLOCK, HOOK_CONNECT)
              and r[HEADER.size:HEADER.size + 2] == image and r[HEADER.size + 4:HEADER.size + 8] == loopback]
    assert others == []
