"""Open N distinct missing files, as fast as Python can: a ring-buffer flood."""

import os
import sys

n = int(sys.argv[1])
for i in range(n):
    try:
        os.open(f"flood-{i}", os.O_RDONLY)
    except FileNotFoundError:
        pass
