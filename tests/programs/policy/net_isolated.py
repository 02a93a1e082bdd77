"""Under --net isolated: a non-loopback connect fails, a loopback one works.

Prints {"remote": errno, "loopback": errno or 0}. The loopback port is fixed:
the run has its own network namespace, so nothing else holds it.
"""

import json
import socket

out = {}
with socket.socket() as s:
    out["remote"] = s.connect_ex(("192.0.2.1", 80))  # TEST-NET-1: never routed from here
with socket.socket() as server, socket.socket() as client:
    server.bind(("127.0.0.1", 8080))
    server.listen()
    out["loopback"] = client.connect_ex(("127.0.0.1", 8080))
print(json.dumps(out, sort_keys=True))
