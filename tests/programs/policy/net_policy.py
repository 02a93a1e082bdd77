"""UDP and IPv6 against a deny-by-default network policy; print what each attempt returned.

The policy (tests/test_policy_kernel.py) allows UDP to 127.0.0.1:5353 and
TCP to [::1]:11 only. Each value is 0 (the kernel let it through) or an errno.
"""

import json
import socket


def send(peer: tuple[str, int], with_sendmsg: bool = False) -> int | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            if with_sendmsg:
                s.sendmsg([b"y"], [], 0, peer)
            else:
                s.sendto(b"x", peer)
        except OSError as exc:
            return exc.errno
    return 0


def connect6(port: int) -> int:
    with socket.socket(socket.AF_INET6) as s:
        return s.connect_ex(("::1", port))


out = {
    "udp_sendto_allowed": send(("127.0.0.1", 5353)),
    "udp_sendmsg_allowed": send(("127.0.0.1", 5353), with_sendmsg=True),
    "udp_sendto_denied": send(("127.0.0.2", 5354)),
    "tcp6_denied": connect6(10),
    "tcp6_allowed": connect6(11),  # nothing listens: refused, but by the peer, not the policy
}
print(json.dumps(out, sort_keys=True))
