"""Over-long names: one path argument of exactly 4095 bytes, two longer ones.

Usage: long_paths.py DIR
The 4095-byte spelling of DIR/f opens (the kernel's limit is 4095 bytes plus
the NUL); the two longer ones differ only past byte 4095 and fail with
ENAMETOOLONG. Then a copy of /bin/true, DIR/t, is executed by its 4095-byte
spelling.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys

LIMIT = 4095


def main() -> None:
    os.chdir(sys.argv[1])
    with open("f", "w") as f:
        f.write("x")
    exact = "./" * ((LIMIT - 1) // 2) + "f"
    assert len(exact) == LIMIT
    os.close(os.open(exact, os.O_RDONLY))
    for tail in ("one", "two"):
        with contextlib.suppress(OSError):
            os.open("./" * 2100 + tail, os.O_RDONLY)
    shutil.copy("/bin/true", "t")
    program = "./" * ((LIMIT - 1) // 2) + "t"
    pid = os.fork()
    if pid == 0:
        os.execv(program, ["t"])
    _, status = os.waitpid(pid, 0)
    assert status == 0


if __name__ == "__main__":
    main()
