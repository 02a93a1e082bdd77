"""Four threads each write five files, then three forked children one file each."""

import os
import threading


def work(i: int) -> None:
    for j in range(5):
        with open(f"t{i}-{j}.txt", "w") as f:
            f.write("x")


threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
children = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        with open(f"child{i}.txt", "w") as f:
            f.write("c")
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
