"""More short-lived threads than the in-flight table has slots, each opening one file."""

import os
import sys
import threading

os.mkdir("t")


def work(i: int) -> None:
    os.close(os.open(f"t/{i}", os.O_WRONLY | os.O_CREAT, 0o600))


for i in range(int(sys.argv[1])):
    t = threading.Thread(target=work, args=(i,))
    t.start()
    t.join()
