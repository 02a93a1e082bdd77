"""Archives that stay within every cap and still hold millions of items, written fast and streamed.

Shared by the reader tests (tests/test_streamed_readers.py) and the reader
bench (bench/readers.py). Each is the minimal golden archive with one member
replaced by a generated stream, its manifest declaring the stream's true size
and digest, so every header check admits it and only the readers' own memory
and time are at stake:

- `surface_bomb`: `capability-surface.json` with millions of one-letter
  `filesystem_paths` (about 4 bytes a value; a few tens of KB compressed);
- `kernel_flood`: `layers/kernel.ndjson` with millions of opens of a path the
  surface already lists, each line its own `seq`: a valid archive.

Data is made a block of lines at a time, twice (once for the digest the
manifest declares first, once to write), and deflated at level 1.
"""

from __future__ import annotations

import hashlib
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec

from runner.evidence.archive import MANIFEST, load_members

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "golden" / "archive-minimal"
SURFACE = "capability-surface.json"
KERNEL = "layers/kernel.ndjson"
BLOCK_LINES = 20_000
KERNEL_LINES = (
    b'{"schema":"assay.runner.kernel_event.v0","run_id":"run_minimal","seq":%d,"pid":2,'
    b'"event_type":1,"kind":"openat","value":"/tmp/assay-runner/work/input.txt","flags":0}\n',
    b'{"schema":"assay.runner.kernel_event.v0","run_id":"run_minimal","seq":%d,"pid":2,'
    b'"event_type":4,"kind":"exec","value":"/usr/bin/cat"}\n',
)
"""An open of a file and an exec of a program the golden surface lists, taken in turn: about
155 bytes a line, so 6.7 million lines are the member cap's gibibyte."""


def _digest(chunks: Iterable[bytes]) -> tuple[int, str]:
    h, n = hashlib.sha256(), 0
    for chunk in chunks:
        h.update(chunk)
        n += len(chunk)
    return n, "sha256:" + h.hexdigest()


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def write_replacing(path: Path, name: str, stream: Callable[[], Iterator[bytes]]) -> Path:
    """The golden archive with member `name` replaced by `stream()` (called twice), declared honestly."""
    members = load_members(GOLDEN)
    size, sha = _digest(stream())
    manifest = msgspec.json.decode(members[MANIFEST])
    manifest["files"][name] = {"path": name, "sha256": sha, "bytes": size}
    members[MANIFEST] = msgspec.json.encode(manifest) + b"\n"
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        for member in [MANIFEST, *sorted(set(members) - {MANIFEST})]:
            data = stream() if member == name else iter([members[member]])
            length = size if member == name else len(members[member])
            out.write(z.compress(_header(member, length)))
            for chunk in data:
                out.write(z.compress(chunk))
            out.write(z.compress(bytes(-length % tarfile.BLOCKSIZE)))
        out.write(z.compress(bytes(2 * tarfile.BLOCKSIZE)))
        out.write(z.flush())
    return path


def surface_values(count: int) -> Iterator[bytes]:
    """A surface document whose `filesystem_paths` holds `count` copies of "a"."""
    yield b'{"schema":"assay.runner.capability_surface.v0","run_id":"run_minimal","filesystem_paths":['
    block = b'"a",' * BLOCK_LINES
    left = count - 1
    while left > 0:
        n = min(left, BLOCK_LINES)
        yield block[:4 * n]
        left -= n
    yield b'"a"],"network_endpoints":[],"process_execs":["/usr/bin/cat","/usr/bin/sh"],"mcp_tools":[],' \
          b'"policy_decisions":[]}\n'


def kernel_lines(count: int, execs: bool = True) -> Iterator[bytes]:
    """The golden kernel layer's lines, then opens of a listed file up to `count` lines in all,
    every other one an exec instead with `execs`."""
    templates = KERNEL_LINES if execs else KERNEL_LINES[:1] * 2
    golden = (GOLDEN / KERNEL).read_bytes()
    yield golden
    for start in range(golden.count(b"\n"), count, BLOCK_LINES):
        yield b"".join([templates[seq % 2] % seq for seq in range(start, min(start + BLOCK_LINES, count))])


def surface_bomb(path: Path, values: int) -> Path:
    return write_replacing(path, SURFACE, lambda: surface_values(values))


def kernel_flood(path: Path, lines: int, execs: bool = True) -> Path:
    return write_replacing(path, KERNEL, lambda: kernel_lines(lines, execs))
