"""Are this installation's four C pieces in place and in use? (`python -m runner.host.native`)

`scripts/build_native.sh` builds them (`make setup`, the image build). Each has
a Python fallback with the same output, so a missing or unloadable one goes
unnoticed but for the clock: the ring read with one Python call per record,
a 2-5x slower normalizer, a slower spool read back, Python's start-up (about
100 ms) on every daemon client call. This asks what the runner itself asks
(`ringsink.available()`, the two `accel.native`, which program `assay-runner` is) and loads each library, so
a piece built against the wrong Python or C library fails here, not as a
silent fallback. The image build's last step runs it (a failure fails the
build), and so does its test (tests/test_image.py).
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from pathlib import Path

from ebpf import ringsink
from normalizer import accel
from spool import accel as spool_accel

FIX = "run 'sudo make setup' (scripts/build_native.sh)"
ELF = b"\x7fELF"


@dataclass(frozen=True)
class Piece:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        """One line as `doctor` prints its checks: status, name, detail."""
        return f"{'ok' if self.ok else 'FAIL':<5} {self.name:<10} {self.detail}"


def ring_consumer() -> Piece:
    """The C ring consumer: built, no older than its source, and loadable with ctypes."""
    if not ringsink.available():
        return Piece("ringsink", False, f"{ringsink.LIBRARY} is missing or older than its source: {FIX}")
    try:
        ctypes.CDLL(str(ringsink.LIBRARY))
    except OSError as exc:
        return Piece("ringsink", False, f"{ringsink.LIBRARY} does not load ({exc}): {FIX}")
    return Piece("ringsink", True, str(ringsink.LIBRARY))


def accelerator() -> Piece:
    """The normalizer's C accelerator: imported by normalizer.accel, and no older than its source."""
    if accel.native is None:
        return Piece("fastscan", False, f"{accel.refused or 'normalizer._fastscan is not in use'}: {FIX}")
    return Piece("fastscan", True, str(accel.native.__file__))


def frame_reader() -> Piece:
    """The spool reader's C frame walk: imported by spool.accel, and no older than its source."""
    if spool_accel.native is None:
        return Piece("framescan", False, f"{spool_accel.refused or 'spool._framescan is not in use'}: {FIX}")
    return Piece("framescan", True, str(spool_accel.native.__file__))


def fast_client(bindir: Path | None = None) -> Piece:
    """`assay-runner` beside this Python is the C client, and the Python CLI it hands over to is there."""
    bindir = bindir or Path(sys.executable).parent
    client, python_cli = bindir / "assay-runner", bindir / "assay-runner-py"
    try:
        with client.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        return Piece("fastclient", False, f"{client}: {exc.strerror}: {FIX}")
    if magic != ELF:
        return Piece("fastclient", False, f"{client} is not the C client (pip's Python script?): {FIX}")
    if not python_cli.is_file():
        return Piece("fastclient", False, f"{python_cli} is missing (the C client hands over to it): {FIX}")
    return Piece("fastclient", True, f"{client} (Python CLI: {python_cli.name})")


def pieces() -> list[Piece]:
    return [ring_consumer(), accelerator(), frame_reader(), fast_client()]


def main() -> int:
    """Print one line per piece; exit 1 when any is not in use."""
    found = pieces()
    for piece in found:
        print(piece.line())
    return 0 if all(p.ok for p in found) else 1


if __name__ == "__main__":
    sys.exit(main())
