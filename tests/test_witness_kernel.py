"""The git + python witness job: the kernel layer sees all that `strace -f` sees, and no more.

The job (tests/programs/transient/git_job.sh: `git init`, ten files, `git add`, `git commit`,
then a JSON file written by python) runs under strace inside the observed run. Every call
strace saw that the kernel layer claims must be exactly one of its lines, and every such line
of the job's processes must be one of those calls:

- each open (open, openat, openat2, creat), failed or not, is an `openat` line naming the file
  (`status` on a failure), except a read of a path the contract's telemetry table lists
  (folded), and a change of such a path, which is an `event_83` line;
- each exec is an `exec` line, a failed one `event_101`;
- each file-system change is its `event_1xx` line(s) (tests/strace_witness.py `expected`).

The path each open's line names is the kernel's where the kernel offers it (`path_source=
kernel`: strace's `-y` answer, the file the descriptor is on) and the requested string resolved
against the directory otherwise. git's random temporary names are compared with the archive's
stand-ins (`tmp_obj_~1`) by their stem. `MATRIX_TESTS=full make kernel-matrix` runs this on each
kernel: on Debian 6.1, which lacks hooks the monitor knows, they are absent-by-kernel, not lost.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from normalizer.fsops import FAILED
from tests.recount import is_telemetry_path
from tests.strace_witness import DIRECTORY_CALLS, Call, calls, expected
from tests.support import Archive, run_observed, unique_run_id

pytestmark = pytest.mark.kernel

JOB = Path(__file__).resolve().parent / "programs" / "transient" / "git_job.sh"
OPENS = ("open", "openat", "openat2", "creat")
FS_OPS = ("mkdir,mkdirat,unlink,unlinkat,rmdir,rename,renameat,renameat2,link,linkat,symlink,symlinkat,"
          "mknod,mknodat,truncate,chmod,fchmod,fchmodat,utimensat")
TRACED = ",".join((*OPENS, "execve", "execveat", FS_OPS, *DIRECTORY_CALLS))
"""The claimed calls, and those that give each process its directory (tests/strace_witness.py)."""
OPENAT, EXEC, TABLE_CHANGE = 1, 4, 83
CHANGES = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_TMPFILE")
"""An open with any of these is never folded (docs/artifacts.md, "The telemetry table folds reads only")."""
STRACE_RANDOM = re.compile(r"(/tmp_obj_|/\.git/t)\w{6}$")
ARCHIVE_STANDIN = re.compile(r"(/tmp_obj_|/\.git/t)~\d+$")
Line = tuple[int, str | None, bool]
"""(event type, value, a failed open): one line of the kernel layer, or what one strace call
implies (a failed file operation is its id plus 100 instead)."""


def stem(value: str | None) -> str | None:
    """A path with git's random temporary name (strace's) or its stand-in (the archive's) cut off."""
    if value is None:
        return None
    return ARCHIVE_STANDIN.sub(r"\1~", STRACE_RANDOM.sub(r"\1~", value))


def open_line(call: Call, kernel_paths: bool) -> Line | None:
    """The line one open implies, or None when the telemetry table folds it."""
    dirfd = None if call.name in ("open", "creat") else 0
    asked = call.path(dirfd, 0 if dirfd is None else 1)
    path = call.ret_path if kernel_paths and call.ret >= 0 and call.ret_path else asked
    changes = call.name == "creat" or any(flag in arg for arg in call.args[1:] for flag in CHANGES)
    if is_telemetry_path(path):
        return (TABLE_CHANGE, path, call.ret < 0) if changes else None
    return (OPENAT, path, call.ret < 0)


def implied(witness: list[Call], kernel_paths: bool) -> Counter[Line]:
    want: Counter[Line] = Counter()
    for call in witness:
        if call.name in OPENS:
            lines = [line] if (line := open_line(call, kernel_paths)) else []
        elif call.name in DIRECTORY_CALLS:
            continue
        elif call.name in ("execve", "execveat") and call.ret >= 0:
            lines = [(EXEC, call.path(None, 0) if call.name == "execve" else call.path(0, 1), False)]
        else:
            lines = [(t + (FAILED if call.ret < 0 else 0), v, False) for t, v in expected(call)]
        want.update((t, stem(v), failed) for t, v, failed in lines)
    return want


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, list[Call]]:
    out = tmp_path_factory.mktemp("out")
    work = tmp_path_factory.mktemp("work").resolve()
    witness = out / "strace.txt"
    strace = shutil.which("strace")
    assert strace, "strace is installed by scripts/setup.sh"
    run_id = unique_run_id("witness")
    proc = run_observed(out, run_id, strace, "-f", "-qq", "-y", "-s", "4096", "-e", f"trace={TRACED}",
                        "-o", witness, "sh", JOB, workdir=work)
    assert proc.returncode == 0, proc.stderr
    return Archive(out / f"{run_id}.tar.gz"), calls(witness, str(work))


def test_the_kernel_layer_is_what_strace_saw(observed) -> None:
    archive, witness = observed
    kernel_paths = "s2_path_source: path_source=user_memory" not in archive.health["notes"]
    want = implied(witness, kernel_paths)
    job = [e for e in archive.kernel if e["pid"] != 1]  # pid 1: strace itself
    got = Counter((e["event_type"], stem(e["value"]), "status" in e) for e in job
                  if e["event_type"] in {t for t, _, _ in want})
    assert (sorted((got - want).items(), key=repr), sorted((want - got).items(), key=repr)) == ([], [])
    # the job did what it is for, so equality above is not vacuous
    assert {EXEC, OPENAT, 120, 122, 123, 124, 125, 126, 127, 128, 175, 220} <= {t for t, _, _ in want}
    assert sum(n for (t, _, failed), n in want.items() if t == OPENAT and failed) > 0
    assert {(EXEC, "/usr/bin/git", False), (EXEC, "/usr/bin/python3", False)} <= set(want)


def test_what_the_job_did_beside_its_claimed_calls_is_strace_s_own(observed) -> None:
    archive, witness = observed
    claimed = {t for t, _, _ in implied(witness, True)} | {OPENAT, EXEC, TABLE_CHANGE}
    rest = Counter(e["kind"] for e in archive.kernel if e["pid"] != 1 and e["event_type"] not in claimed)
    assert set(rest) <= {"event_80"}, rest  # the child's PTRACE_TRACEME before it execs the job


def test_no_hook_the_kernel_has_was_lost(observed) -> None:
    archive, _ = observed
    # no note: every hook attached (the host); else the missing ones are all absent-by-kernel
    for note in (n for n in archive.health["notes"] if n.startswith("s2_kernel_hooks: ")):
        assert note.endswith(" lost=none complete=true"), note
    assert archive.health["kernel_layer"] == "complete" and archive.health["ringbuf_drops"] == 0
