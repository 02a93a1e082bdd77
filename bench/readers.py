"""`python -m bench.readers [--out DIR]`: each reader on the hostile-but-honest archives, timed.

Builds the archives of bench/hostile_archives.py (15 million surface values;
2 million kernel lines; 6.7 million kernel lines, the member cap's gibibyte)
and runs `validate`, `show`, `report` and `diff` on them as the CLI, one child
each, printing one JSON line per run: wall seconds, CPU seconds of the child,
its peak RSS in MiB (wait4), and its exit code. The tests assert only the
memory (tests/test_streamed_readers.py); the seconds are here, where a loaded
machine shows as CPU seconds well under wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.hostile_archives import GOLDEN, kernel_flood, surface_bomb


def measure(*args: str | Path, cwd: Path) -> dict[str, object]:
    """One CLI run: wall and CPU seconds, peak RSS, exit code."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli.main", *map(str, args)], cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return {"wall_s": round(time.monotonic() - start, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "exit": os.waitstatus_to_exitcode(status)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="where to build the archives (default: a temp dir)")
    parser.add_argument("--only", choices=("surface", "kernel", "cap"), help="one case only")
    args = parser.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="assay-bench-readers-", dir=args.out) as tmp:
        work = Path(tmp)
        cases = {
            "surface": lambda: surface_bomb(work / "surface.tar.gz", 15_000_000),
            "kernel": lambda: kernel_flood(work / "kernel.tar.gz", 2_000_000, execs=False),
            "cap": lambda: kernel_flood(work / "cap.tar.gz", 6_700_000),
        }
        every = ("validate", "show", "report", "diff")
        readers = {"surface": every, "kernel": every, "cap": ("validate",)}
        for case, build in cases.items():
            if args.only and case != args.only:
                continue
            archive = build()
            for reader in readers[case]:
                argv: tuple[str | Path, ...] = {
                    "validate": ("validate", archive),
                    "show": ("show", "--no-spool", archive),
                    "report": ("report", "--no-spool", archive, "-o", work / "r.html"),
                    "diff": ("diff", GOLDEN, archive),
                }[reader]
                row = {"case": case, "archive_bytes": archive.stat().st_size, "reader": reader,
                       **measure(*argv, cwd=work)}
                print(json.dumps(row), flush=True)
            archive.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
