"""Soak: many runs back to back, several at once, the runner killed in some; what was left behind.

    sudo .venv/bin/python -m bench.soak [--runs 200] [--concurrency 8] [--kills 50]
                                        [--seed 1] [--modes direct,daemon] [--json FILE]

For each mode, first `--concurrency` runs at once time a whole run on this
host as it is now: the median of their wall times is the kill window, a
run's length at the batch's own load. Then `--runs` runs of a small command
go through `assay-runner run`, `--concurrency` at a time, back to back. In `--kills`
of them, chosen with `--seed`, the runner is killed (SIGKILL) at a moment
drawn uniformly from the window (the seed fixes the fractions, the window
scales them): in direct mode the `run` process; in daemon mode the daemon's
worker for that run (the pid in its cgroup's name) once it exists, else the
client. Then one more run
starts (the "next start", where stale runs are recovered), and the census
(bench/leaks.py) counts what the batch left: cgroups, processes, file
descriptors and attached BPF programs, which must all be zero. Daemon mode
also reports the daemon's memory, fds and programs before and after.

A failure is an unkilled run that did not exit 0 with a valid archive, or
any archive, killed run or not, that does not validate (half-written). Not
a test: nothing here asserts; tests/test_soak_smoke.py runs a small soak so
this harness cannot rot. Results go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.daemon import DaemonService
from bench.leaks import (
    census,
    fd_count,
    host_program_count,
    program_ids,
    rss_kib,
    run_parent,
    settled_census,
)
from runner.evidence.archive import read_archive
from runner.evidence.validate import validate_members

RUN_TIMEOUT_S = 300.0
SCRIPT = 'echo "$0" > marker.txt; cat marker.txt > /dev/null; sleep 0.3'
"""The observed command: `sh -c SCRIPT TOKEN`, so the token is in its argv."""


@dataclass(frozen=True)
class Outcome:
    index: int
    run_id: str
    kill_at_s: float | None
    killed: str | None
    """What was killed: `runner`, `worker`, `client`, or None (not planned, or the run ended first)."""
    returncode: int | None
    archive: bool
    failure: str | None
    wall_s: float


@dataclass
class Soak:
    """One mode's batch: where it writes, how it starts the runner, and its token."""

    mode: str
    base: Path
    token: str
    binary: str
    socket: Path | None = None

    def argv(self, run_id: str, workdir: Path) -> list[str]:
        how = ["--daemon", "--socket", str(self.socket)] if self.socket else ["--direct"]
        return [self.binary, "run", *how, "--out", str(self.base / "out"), "--run-id", run_id,
                "--workdir", str(workdir), "--", "sh", "-c", SCRIPT, self.token]

    def run_one(self, index: int, kill_at: float | None) -> Outcome:
        run_id = f"{self.token}-{index:03d}"
        workdir = self.base / "work" / f"{index:03d}"
        workdir.mkdir(parents=True)
        start = time.monotonic()
        with open(self.base / "logs" / f"{run_id}.log", "wb") as log:
            proc = subprocess.Popen(self.argv(run_id, workdir), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=log)
            killed = None
            if kill_at is not None:
                try:
                    proc.wait(timeout=kill_at)
                except subprocess.TimeoutExpired:
                    killed = self._kill(proc, run_id)
            try:
                code: int | None = proc.wait(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
        return self._outcome(index, run_id, kill_at, killed, code, time.monotonic() - start)

    def _kill(self, proc: subprocess.Popen[bytes], run_id: str) -> str:
        """SIGKILL the process running the run: the runner, or in daemon mode its worker."""
        if self.socket is None:
            proc.kill()
            return "runner"
        worker = run_owner(run_id)
        if worker is not None:
            try:
                os.kill(worker, signal.SIGKILL)
                return "worker"
            except ProcessLookupError:
                pass
        proc.kill()
        return "client"

    def _outcome(self, index: int, run_id: str, kill_at: float | None, killed: str | None,
                 code: int | None, wall: float) -> Outcome:
        archive = self.base / "out" / f"{run_id}.tar.gz"
        failure = None
        if archive.exists():
            problems = _problems(archive)
            if problems:
                failure = f"invalid archive: {problems[0]}"
        elif killed is None:
            failure = "no archive"
        if killed is None and failure is None and code != 0:
            failure = f"exit {code}"
        return Outcome(index, run_id, kill_at, killed, code, archive.exists(), failure, round(wall, 3))


def _problems(archive: Path) -> list[str]:
    try:
        return validate_members(read_archive(archive))
    except Exception as exc:  # any unreadable archive is a finding, not a crash
        return [f"unreadable: {exc}"]


def recovered_archives(soak: Soak, outcomes: list[Outcome]) -> dict[str, Any]:
    """Killed runs that have an archive by the end (rebuilt from their spool by a later start):
    how many, and any that does not validate (each one a failure: a half-written archive)."""
    found, invalid = 0, []
    for o in outcomes:
        archive = soak.base / "out" / f"{o.run_id}.tar.gz"
        if o.killed and not o.archive and archive.exists():
            found += 1
            invalid += [f"{o.run_id}: {p}" for p in _problems(archive)[:1]]
    return {"count": found, "invalid": invalid}


def run_owner(run_id: str) -> int | None:
    """The pid that created the run's cgroup (`RUN_ID-PID-HEX`): the runner, or the daemon's worker."""
    parent = run_parent()
    for path in parent.glob(f"{run_id}-*") if parent.is_dir() else ():
        pid = path.name[len(run_id) + 1:].split("-")[0]
        if pid.isdigit():
            return int(pid)
    return None


def kill_plan(runs: int, kills: int, seed: int) -> list[float | None]:
    """For each run, when to kill its runner (a fraction of the kill window), or None."""
    if not 0 <= kills <= runs:
        raise SystemExit(f"--kills must be between 0 and --runs ({runs}), got {kills}")
    rng = random.Random(seed)
    chosen = set(rng.sample(range(runs), kills))
    return [rng.random() if i in chosen else None for i in range(runs)]


def _daemon_state(pids: set[int]) -> dict[str, int]:
    """Memory, fds and BPF programs of the daemon's own processes ({} in direct mode)."""
    if not pids:
        return {}
    return {"daemon_rss_kib": sum(rss_kib(p) for p in pids), "daemon_fds": sum(fd_count(p) for p in pids),
            "daemon_programs": len({i for p in pids for i in program_ids(p)})}


def soak_mode(soak: Soak, plan: list[float | None], concurrency: int,
              daemon: DaemonService | None) -> dict[str, Any]:
    """Run the batch, then the next start, then count what is left."""
    for sub in ("out", "work", "logs"):
        (soak.base / sub).mkdir(parents=True, exist_ok=True)
    # The kill window is a run's wall time at the batch's own concurrency (also warms the daemon up
    # before its "before"): timed alone, it was a tenth of a loaded run's, so every kill landed in set-up.
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        timings = list(pool.map(soak.run_one, range(len(plan), len(plan) + concurrency),
                                [None] * concurrency))
    # The daemon's own processes (main and sensor) hold programs and fds on purpose: they are
    # compared before and after, not counted as the batch's leftovers.
    mine = {daemon.proc.pid, daemon.sensor_pid()} if daemon and daemon.proc else set()
    window = statistics.median(t.wall_s for t in timings)
    moments = [None if f is None else round(f * window, 3) for f in plan]
    before = {"host_programs": host_program_count()} | _daemon_state(mine)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        outcomes = list(pool.map(soak.run_one, range(len(plan)), moments))
    batch_s = time.monotonic() - started
    # ...and so does its spare worker while it waits for the next run (a new one after each run)
    left_by_batch = census(soak.token, mine | (daemon.idle_spare() if daemon else set()))
    recovery = soak.run_one(len(plan) + concurrency, None)  # the next start: recovers what the kills left
    recovery_log = (soak.base / "logs" / f"{recovery.run_id}.log").read_text(errors="replace")
    left = settled_census(soak.token, mine | (daemon.idle_spare() if daemon else set()))
    recovered = recovered_archives(soak, outcomes)
    after = {"host_programs": host_program_count()} | _daemon_state(mine)
    return {
        "mode": soak.mode, "runs": len(plan), "concurrency": concurrency, "batch_s": round(batch_s, 1),
        "kill_window_s": window, "timing_runs": [asdict(t) for t in timings],
        "kills_planned": sum(k is not None for k in plan),
        "killed": {what: sum(o.killed == what for o in outcomes) for what in ("runner", "worker", "client")},
        "failures": [asdict(o) for o in [*timings, *outcomes] if o.failure],
        "recovery_run": asdict(recovery),
        "recovery_said": [line for line in recovery_log.splitlines() if "stale" in line.lower()][:20],
        "recovered_archives": recovered,
        "left_before_next_start": left_by_batch.as_dict(),
        "leaks": left.as_dict(),
        "before": before, "after": after,
        "outcomes": [asdict(o) for o in outcomes],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default="direct,daemon")
    parser.add_argument("--json", type=Path, help="write the full results here")
    parser.add_argument("--keep", action="store_true", help="keep the runs' files (default: removed)")
    args = parser.parse_args(argv)
    plan = kill_plan(args.runs, args.kills, args.seed)
    binary = str(Path(sys.executable).with_name("assay-runner"))
    token = f"soak{secrets.token_hex(4)}"
    base = Path(tempfile.mkdtemp(prefix="assay-soak-", dir="/var/tmp"))
    results = []
    try:
        for mode in args.modes.split(","):
            soak = Soak(mode, base / mode, f"{token}-{mode}", binary)
            if mode == "daemon":
                soak.socket = base / f"{soak.token}.sock"  # workers' argv holds the token: a leaked one shows
                # Room for twice the batch: a killed client's run winds down (its archive is written)
                # while the batch already starts the next one, and must not be refused for the limit.
                config = base / "daemon.toml"
                config.write_text(f"version = 1\n[limits]\nmax_concurrent_runs = {2 * args.concurrency}\n")
                with DaemonService(binary, soak.socket, base / "daemon.log", config) as daemon:
                    results.append(soak_mode(soak, plan, args.concurrency, daemon))
            elif mode == "direct":
                results.append(soak_mode(soak, plan, args.concurrency, None))
            else:
                raise SystemExit(f"unknown mode {mode!r}: direct or daemon")
            print(summary(results[-1]), file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    report = {"seed": args.seed, "token": token, "modes": results}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"modes": [{k: v for k, v in r.items() if k != "outcomes"} for r in results]},
                     indent=2))
    return 0


def summary(result: dict[str, Any]) -> str:
    leaks = result["leaks"]
    line = (f"{result['mode']}: {result['runs']} runs ({result['concurrency']} at once) in "
            f"{result['batch_s']} s, killed {result['killed']}, failures {len(result['failures'])}, "
            f"recovered archives {result['recovered_archives']['count']} "
            f"({len(result['recovered_archives']['invalid'])} invalid), "
            f"leaks: cgroups {leaks['cgroups']} processes {leaks['processes']} "
            f"fds {leaks['file_descriptors']} programs {leaks['attached_programs']}")
    if "daemon_rss_kib" in result["before"]:
        line += (f"; daemon RSS {result['before']['daemon_rss_kib'] / 1024:.1f} -> "
                 f"{result['after']['daemon_rss_kib'] / 1024:.1f} MiB")
    return line


if __name__ == "__main__":
    sys.exit(main())
