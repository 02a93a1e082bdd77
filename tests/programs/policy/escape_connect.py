"""Leave the run's cgroup, then reach for a denied endpoint; print what each attempt returned.

Usage: escape_connect.py CGROUP_DIR
The process writes itself into CGROUP_DIR's `cgroup.procs` (as root it can),
then sends a UDP datagram to 127.0.0.2:5354 and, from a child forked after
the move, connects by TCP to [::1]:10. The policy (tests/test_sandbox_kernel.py)
allows neither. Each value is 0 (the kernel let it through) or an errno;
`moved` is the cgroup the process ended up in.
"""

import json
import os
import socket
import sys


def send() -> int:
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


with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as procs:
    procs.write(f"{os.getpid()}\n")
with open(f"/proc/{os.getpid()}/cgroup") as own:
    moved = next(line.split(":", 2)[2].strip() for line in own if line.startswith("0::"))
print(json.dumps({"moved": moved, "udp_denied": send(), "tcp6_denied_in_child": connect_in_child()},
                 sort_keys=True))
