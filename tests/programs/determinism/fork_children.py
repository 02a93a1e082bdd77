"""Fork four children; each writes its own file, then the parent reads them all."""

import os

children = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        with open(f"child-{i}.txt", "w") as f:
            f.write(f"child {i}\n")
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
with open("summary.txt", "w") as out:
    for i in range(4):
        with open(f"child-{i}.txt") as f:
            out.write(f.read())
