"""Open N distinct missing files, as fast as Python can: a ring-buffer flood."""

import contextlib
import os
import sys

n = int(sys.argv[1])
for i in range(n):
    with contextlib.suppress(FileNotFoundError):
        os.open(f"flood-{i}", os.O_RDONLY)
