"""A tiny "agent" for daemon tests: reports the uid of itself and of a child, touches
its own marker files and connects to its own endpoint (both named on the command line).

    agent.py REPORT TAG PORT
"""

import contextlib
import json
import os
import socket
import subprocess
import sys

report, tag, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
child_uid = int(subprocess.run(["id", "-u"], capture_output=True, text=True, check=True).stdout)
for i in range(3):
    with open(f"marker-{tag}-{i}.txt", "w") as f:
        f.write(tag)
with socket.socket() as s:
    s.settimeout(2)
    with contextlib.suppress(OSError):  # nobody listens: the connect is still evidence
        s.connect(("127.0.0.1", port))
with open(report, "w") as f:
    json.dump({"uid": os.getuid(), "euid": os.geteuid(), "child_uid": child_uid,
               "groups": sorted(os.getgroups()), "cwd": os.getcwd(),
               "env_tag": os.environ.get("AGENT_TAG")}, f)
