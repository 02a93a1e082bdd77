"""Once out of the run's cgroup, reach for a denied endpoint; print what each attempt returned.

Usage: escape_connect.py
The process waits (up to 60 s) until something outside the run moved it into
the root cgroup (the test, as root, writes its pid into the root cgroup's
`cgroup.procs`: the command's accomplice), then sends a UDP datagram to
127.0.0.2:5354 and, from a child forked after the move, connects by TCP to
[::1]:10. The policy (tests/test_sandbox_kernel.py) allows neither. Each
value is 0 (the kernel let it through) or an errno; `moved` is the cgroup
the process ended up in.
"""

import json
import os
import socket
import time


def own_cgroup() -> str:
    with open("/proc/self/cgroup") as own:
        return next(line.split(":", 2)[2].strip() for line in own if line.startswith("0::"))


def send() -> int | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.sendto(b"x", ("127.0.0.2", 5354))
        except OSError as exc:
            return exc.errno
    return 0


def connect_in_child() -> int:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        with socket.socket(socket.AF_INET6) as s:
            os.write(w, str(s.connect_ex(("::1", 10))).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    return int(os.read(r, 16))


start = time.monotonic()
while own_cgroup() != "/" and time.monotonic() - start < 60:
    time.sleep(0.02)
print(json.dumps({"moved": own_cgroup(), "udp_denied": send(), "tcp6_denied_in_child": connect_in_child()},
                 sort_keys=True))
