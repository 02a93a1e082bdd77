"""`assay-runner determinism`: run a command N times; the archives must be identical.

The three-run gate of design section 4. The working directory is copied
aside first and restored at the same path before every run (and at the end),
so each run starts from the same state; each run is observed exactly like
`run` would, then every member of the archives, manifest included, is
compared byte for byte with run 1. Differing members are named with their
first differing lines. Each run must also pass health (kernel_layer=complete,
ringbuf_drops=0, cgroup_correlation=clean) and exit with the same code, and
leave the same workdir end state (every path's type, mode and content or
link target, runner/evidence/endstate.py): a file whose content depends on
the time is named there, though the archives cannot show it.

The clock variables the common tools read (SOURCE_DATE_EPOCH, GIT_AUTHOR_DATE,
GIT_COMMITTER_DATE) are set to one value for every run unless --no-pin-time;
a value the caller set is kept. The report lists them.

Writes --out/run-1/RUN_ID.tar.gz (+ .spool), run-2/, ... and
--out/determinism-report.json; prints the readable report on stdout and
progress on stderr. Ctrl-C ends the current run and stops the check (the
workdir is restored).

Exit codes:
  0    every run byte-identical, same exit code, health passing
  1    members differ, the workdir end states differ, exit codes differ, or a
       run's health is not passing
       (health is reported but not failed with --allow-unhealthy)
  2    unusable input: bad options, command not found, workdir cannot be
       snapshotted, --out not writable or holding archives (use --force)
  125  the runner failed during a run (as for 'run')
  130  interrupted
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import msgspec

from normalizer.text import escape_os
from runner.capture.session import RunRequest, execute
from runner.capture.snapshot import Snapshot, SnapshotError
from runner.cli.cmd_run import STATE_DIR, add_capture_options, build_request, prepare_out_dir
from runner.display import printable
from runner.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, RunnerError
from runner.evidence.archive import load_members, sha256_ref, write_atomic
from runner.evidence.clock import pin_clock
from runner.evidence.compare import RunInput, build_report, render_text
from runner.evidence.endstate import end_state

REPORT_NAME = "determinism-report.json"
SCRATCH_ROOTS = (STATE_DIR, Path(tempfile.gettempdir()), Path("/var/tmp"), Path("/dev/shm"))
"""First the runner's own root-owned state directory: staged archives are `--out`s
too, and /tmp is a write tree of `workspace-write` (docs/architecture.md)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `determinism` subcommand."""
    p = sub.add_parser(
        "determinism",
        help="run a command several times and require byte-identical archives",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", type=int, default=3, metavar="N",
                   help="number of runs, at least 2 (default: 3)")
    add_capture_options(p)
    p.add_argument("--force", action="store_true",
                   help="overwrite archives of the same run id in --out/run-N/")
    p.add_argument("--allow-unhealthy", action="store_true",
                   help="report but do not fail runs whose health is not passing")
    p.add_argument("--no-pin-time", dest="pin_time", action="store_false",
                   help="do not set the clock variables (SOURCE_DATE_EPOCH, GIT_AUTHOR_DATE, "
                        "GIT_COMMITTER_DATE) to one value for every run (docs/determinism.md)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                   help="the command to run, after '--'")
    p.set_defaults(func=main)


def progress(message: str) -> None:
    """One progress line on stderr, so stdout keeps only the report."""
    print(printable(f"assay-runner: determinism: {message}"), file=sys.stderr, flush=True)


def scratch_dir(workdir: Path) -> Path:
    """A fresh temp dir outside the workdir, for the snapshot and staged archives.

    Outside, because restoring the workdir deletes whatever is inside it.
    """
    with contextlib.suppress(OSError):
        STATE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    for root in SCRATCH_ROOTS:
        root = root.resolve()
        if root.is_dir() and not root.is_relative_to(workdir):
            try:
                return Path(tempfile.mkdtemp(prefix="assay-determinism-", dir=root))
            except OSError as exc:  # not root: STATE_DIR is root's (determinism runs need root anyway)
                raise RunnerError(f"cannot create a scratch directory in {root}: {exc.strerror}; "
                                  "determinism needs root, as run does", EXIT_BAD_INPUT) from exc
    raise RunnerError(f"no temp directory outside --workdir {workdir}: choose a smaller workdir",
                      EXIT_BAD_INPUT)


def prepare(args: argparse.Namespace, scratch: Path) -> tuple[RunRequest, list[Path], list[str]]:
    """Check every input like `run` does; RunnerError (exit 2) before anything runs.

    Also the clock variables pinned for every run (clock.py), unless --no-pin-time."""
    if args.runs < 2:
        raise RunnerError(f"--runs must be at least 2, got {args.runs}", EXIT_BAD_INPUT)
    staged = argparse.Namespace(**{**vars(args), "out": scratch / "run-1", "force": True})
    try:
        req = build_request(staged)
        out = args.out.resolve()
        targets = [prepare_out_dir(out / f"run-{i}", req.run_id, args.force, req.user, req.policy)
                   for i in range(1, args.runs + 1)]
    except RunnerError as exc:
        raise RunnerError(str(exc), EXIT_BAD_INPUT) from exc
    if not args.pin_time:
        return req, targets, []
    env, pinned = pin_clock(req.env)
    return dataclasses.replace(req, env=env), targets, pinned


def publish_staged(scratch: Path, targets: list[Path]) -> None:
    """Move each run's staged archive and spool into --out/run-N/."""
    for number, target in enumerate(targets, start=1):
        staged = scratch / f"run-{number}"
        if staged.is_dir():
            for file in staged.iterdir():
                shutil.move(file, target / file.name)


def run_all(req: RunRequest, runs: int, snapshot: Snapshot, scratch: Path,
            excluded: frozenset[Path]) -> tuple[list[int], list[dict[str, str]]]:
    """Restore the workdir and run the command, `runs` times; the exit codes and workdir end states."""
    codes: list[int] = []
    states: list[dict[str, str]] = []
    for number in range(1, runs + 1):
        progress(f"run {number}/{runs}: restoring {req.workdir} and running {shlex.join(req.argv)}")
        snapshot.restore()
        staged = scratch / f"run-{number}"
        staged.mkdir(exist_ok=True)
        result = execute(dataclasses.replace(req, out_dir=staged))
        h = result.normalized.health
        progress(f"run {number}/{runs}: exit {result.exit_code}, "
                 f"{result.normalized.kernel.count} kernel events, "
                 f"kernel_layer={h.kernel_layer} ringbuf_drops={h.ringbuf_drops} "
                 f"cgroup_correlation={h.cgroup_correlation}")
        if result.exit_code == 128 + signal.SIGINT:
            # Ctrl-C reaches the command, not the runner: stop here rather than
            # start the next run (the workdir is still restored on the way out).
            raise KeyboardInterrupt
        codes.append(result.exit_code)
        states.append(end_state(req.workdir, excluded))
    return codes, states


def main(args: argparse.Namespace) -> int:
    workdir = (args.workdir or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise RunnerError(f"--workdir {workdir} is not a directory", EXIT_BAD_INPUT)
    scratch = scratch_dir(workdir)
    keep_scratch = False
    snapshot: Snapshot | None = None
    targets: list[Path] = []
    try:
        req, targets, pinned = prepare(args, scratch)
        if pinned:
            progress("clock pinned for every run: " + ", ".join(pinned))
        out = args.out.resolve()
        excluded = frozenset({out}) if out != workdir and out.is_relative_to(workdir) else frozenset()
        try:
            snapshot = Snapshot.take(workdir, scratch / "snapshot", excluded)
        except SnapshotError as exc:
            raise RunnerError(str(exc), EXIT_BAD_INPUT) from exc
        codes, states = run_all(req, args.runs, snapshot, scratch, excluded)
    finally:
        if snapshot is not None:
            try:
                snapshot.restore()
            except SnapshotError as exc:
                keep_scratch = True
                print(printable(f"assay-runner: error: {exc}"), file=sys.stderr)
        publish_staged(scratch, targets)
        if not keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return report(req, out, targets, codes, args.allow_unhealthy, states, pinned)


def report(req: RunRequest, out: Path, targets: list[Path], codes: list[int],
           allow_unhealthy: bool, states: list[dict[str, str]], pinned: list[str]) -> int:
    """Compare the published archives, write the JSON report, print the readable one."""
    inputs = []
    for target, code in zip(targets, codes, strict=True):
        archive = target / f"{req.run_id}.tar.gz"
        inputs.append(RunInput(str(archive), sha256_ref(archive.read_bytes()), code,
                               load_members(archive)))
    # argv and workdir in v0 text: any byte the user passed survives into the JSON report
    result = build_report(req.run_id, [escape_os(a) for a in req.argv], escape_os(str(req.workdir)),
                          inputs, allow_unhealthy, states, pinned)
    path = out / REPORT_NAME
    write_atomic(path, msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
    print(render_text(result))
    print(f"report: {path}")
    return 0 if result.passed else EXIT_CHECK_FAILED
