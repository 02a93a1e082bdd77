"""Try each endpoint given as JSON on argv[1]; print the errno each attempt got (0: through).

A case is [family, address, port, protocol, via]: a UDP or TCP socket of that
family, then a connect() (non-blocking: an allowed TCP connect returns at
once, refused, unreachable or in progress) or a sendto(). The network
policy's programs answer before routing, so EPERM is theirs and anything
else means they let the attempt through.
"""

import json
import socket
import sys

KINDS = {"tcp": socket.SOCK_STREAM, "udp": socket.SOCK_DGRAM}


def attempt(family: int, address: str, port: int, protocol: str, via: str) -> int:
    with socket.socket(family, KINDS[protocol]) as s:
        s.setblocking(False)
        try:
            if via == "sendto":
                s.sendto(b"x", (address, port))
                return 0
            return s.connect_ex((address, port))
        except OSError as exc:
            return exc.errno or -1


print(json.dumps([attempt(*case) for case in json.loads(sys.argv[1])]))
