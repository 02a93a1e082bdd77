"""Hostile archives and spools, written straight to disk, and the peak memory of a CLI run.

Bombs are generated a chunk at a time into gzip (nothing near their inflated
size is ever held by the test), and tar headers are made by hand where
tarfile would refuse or buffer them (a 256 MiB long name).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import msgspec

from runner.evidence.archive import MANIFEST, load_members

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "golden" / "archive-minimal"
CHUNK = 1 << 20
MiB = 1 << 20
GiB = 1 << 30


def repeated(byte: bytes, size: int) -> Iterator[bytes]:
    """`size` copies of `byte`, a MiB at a time."""
    block = byte * CHUNK
    while size > 0:
        yield block[: min(size, CHUNK)]
        size -= CHUNK


def digest(chunks: Iterable[bytes]) -> tuple[int, str]:
    """(size, manifest digest) of a stream."""
    h, n = hashlib.sha256(), 0
    for chunk in chunks:
        h.update(chunk)
        n += len(chunk)
    return n, "sha256:" + h.hexdigest()


class Entry:
    """One tar entry: its name, type and size as the header says, and its data stream."""

    def __init__(self, name: str, data: Iterable[bytes] | bytes, size: int | None = None,
                 kind: bytes = tarfile.REGTYPE) -> None:
        self.name, self.kind = name, kind
        self.data = [data] if isinstance(data, bytes) else data
        size = len(data) if isinstance(data, bytes) else size
        assert size is not None
        self.size = size

    def header(self) -> bytes:
        info = tarfile.TarInfo(self.name)
        info.size, info.type, info.mode, info.mtime = self.size, self.kind, 0o644, 0
        return info.tobuf(format=tarfile.GNU_FORMAT)


def write_tar_gz(path: Path, entries: Iterable[Entry], level: int = 9) -> Path:
    """A .tar.gz of `entries` streamed through zlib (headers by hand, data chunk by chunk)."""
    z = zlib.compressobj(level, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        for entry in entries:
            out.write(z.compress(entry.header()))
            written = 0
            for chunk in entry.data:
                written += len(chunk)
                out.write(z.compress(chunk))
            assert written == entry.size, entry.name
            out.write(z.compress(b"\0" * (-written % 512)))
        out.write(z.compress(b"\0" * 1024))
        out.write(z.flush())
    return path


def golden_members() -> dict[str, bytes]:
    return load_members(GOLDEN)


def manifest_with(members: dict[str, bytes], sizes: dict[str, tuple[int, str]]) -> bytes:
    """The golden manifest with some members' declared (size, digest) replaced."""
    doc = msgspec.json.decode(members[MANIFEST])
    for name, (size, sha) in sizes.items():
        doc["files"][name] = {"path": name, "sha256": sha, "bytes": size}
    doc["files"] = dict(sorted(doc["files"].items()))
    return msgspec.json.encode(doc) + b"\n"


def archive_replacing(path: Path, replaced: Mapping[str, tuple[int, Iterable[bytes]]],
                      manifest: bytes | None = None, level: int = 9) -> Path:
    """The golden archive with members replaced by streams (manifest kept unless given)."""
    members = golden_members()
    entries = [Entry(MANIFEST, manifest or members[MANIFEST])]
    for name in sorted(set(members) | set(replaced)):
        if name == MANIFEST:
            continue
        if name in replaced:
            size, data = replaced[name]
            entries.append(Entry(name, data, size))
        else:
            entries.append(Entry(name, members[name]))
    return write_tar_gz(path, entries, level)


class Measured:
    """A finished CLI run: exit code, output, and its own peak RSS (from wait4)."""

    def __init__(self, returncode: int, stdout: str, stderr: str, max_rss_kib: int) -> None:
        self.returncode, self.stdout, self.stderr, self.max_rss_kib = returncode, stdout, stderr, max_rss_kib

    @property
    def max_rss_mib(self) -> float:
        return self.max_rss_kib / 1024


MEASURE = ("import os, subprocess, sys\n"
           "child = subprocess.Popen(sys.argv[2:])\n"
           "_, status, usage = os.wait4(child.pid, 0)\n"
           "open(sys.argv[1], 'w').write(f'{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}')\n")
"""A small process that starts the CLI and reports its wait4 figures. The CLI is not started from
the test process itself: a child's ru_maxrss starts at the high-water mark of the process it was
forked from (exec records the old address space's), and the test process grows to hundreds of MiB
over a full suite."""


def measure_cli(*args: str | Path, cwd: Path) -> Measured:
    """Run `assay-runner ARGS` and read the peak RSS of that one process from wait4(2), through
    MEASURE (RUSAGE_CHILDREN would mix in every child this test process ever had)."""
    out, err, figures = cwd / ".measure.out", cwd / ".measure.err", cwd / ".measure.rusage"
    with open(out, "wb") as o, open(err, "wb") as e:
        subprocess.run([sys.executable, "-c", MEASURE, str(figures), sys.executable, "-m", "runner.cli.main",
                        *map(str, args)], cwd=cwd, stdin=subprocess.DEVNULL, stdout=o, stderr=e, check=True)
    returncode, max_rss = map(int, figures.read_text().split())
    result = Measured(returncode, out.read_text(errors="replace"), err.read_text(errors="replace"), max_rss)
    for path in (out, err, figures):
        path.unlink()
    return result
