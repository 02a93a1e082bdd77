"""Four threads, each opening its own files (a read and a write), concurrently."""

import threading

barrier = threading.Barrier(4)


def work(i: int) -> None:
    barrier.wait()  # start together, so the opens really interleave
    with open(f"input-{i}.txt") as f:
        data = f.read()
    for j in range(3):
        with open(f"thread-{i}-{j}.txt", "w") as f:
            f.write(data)


threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
