"""One observed run: cgroup, the run's source, spawn, drain, spool, normalize, archive.

This is the per-run pipeline (spool -> normalizer -> publish); the records
come from a `Sensor` (runner/capture/sources.py): a monitor of the run's own
in direct mode, the daemon's shared one through its observer in a daemon
worker. Order matters: the run is in the monitor's maps and the spool
header written before the command may start, and after the command exits the ring buffer is
drained once more, so no event in flight is lost. Side effects (cgroup,
monitor) are undone in `finally` whatever happens.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ebpf.wire import DEFAULT_RINGBUF_PAGES
from normalizer.build import NormalizedRun, dac_questions, normalize
from normalizer.text import escape_os
from policy.model import ResolvedPolicy
from runner.capture.cgroup import RunCgroup
from runner.capture.control import RunControl, TerminalControl
from runner.capture.interrupt import Interruptions, run_exit_code
from runner.capture.limits import DEFAULT_LIMITS, CgroupLimits, LimitGroups
from runner.capture.live import LivePass
from runner.capture.live import start as start_live
from runner.capture.live_child import peak_rss_kib
from runner.capture.owner import claim
from runner.capture.phases import capture
from runner.capture.sdk_server import SdkServer
from runner.capture.sources import LocalSensor, RunSource, Sensor
from runner.capture.spawn import CallerProcess, CommandSpec, Credentials, Spawned, spawn
from runner.enforce import prepare as enforce
from runner.enforce.dac import check_as
from runner.enforce.seccomp_notify import Guard
from runner.errors import RunnerError
from runner.evidence.publish import publish
from runner.logs import get_logger
from spool.dirfd import open_dir
from spool.format import SPOOL_FORMAT, DacVerdicts, Spool, SpoolHeader, SpoolTrailer, read_spool
from spool.writer import Spooler, SpoolReplaced, SpoolWriteFailed

log = get_logger("session")


@dataclass(frozen=True)
class RunRequest:
    """A validated `run` invocation."""

    run_id: str
    exe: str
    argv: list[str]
    workdir: Path
    out_dir: Path
    ringbuf_pages: int = DEFAULT_RINGBUF_PAGES
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    user: Credentials | None = None
    isolate_net: bool = False
    policy: ResolvedPolicy | None = None
    stdio: tuple[int, int, int] | None = None
    """stdin, stdout, stderr for the command (default: the runner's own)."""
    on_start: Callable[[], None] | None = None
    """Called right before the command is let go (after the monitor is attached)."""
    caller: CallerProcess | None = None
    """The daemon's caller's working directory, umask and limits (spawn.CallerProcess)."""
    control: RunControl | None = None
    """Status line and requests; None is direct mode's terminal."""
    forward_first_signal: bool = False
    """Forward the first SIGTERM/SIGHUP to the command instead of killing the run (interrupt.py)."""
    exit_after: bool = False
    """The process exits after this run (`run`): signals after the archive is written are ignored."""
    allow_compat_syscalls: bool = False
    """Let the command make non-native ABI syscalls, which no tracepoint sees (runner/enforce/seccomp.py)."""
    limits: CgroupLimits | None = DEFAULT_LIMITS
    """The run cgroup's limits; direct mode's defaults unless the caller (options, daemon config) says."""
    sensor: Sensor | None = None
    """Where the run's records come from; None: a monitor of its own (direct mode)."""
    staged: bool = False
    """`out_dir` is a staging directory whose files are copied durably afterwards (the daemon): no fsync."""
    on_spool_final: Callable[[], None] | None = None
    """Called once the run's processes are gone and nothing more will be added to the spool (its
    permission verdicts included), before the archive is made: the daemon delivers the spool meanwhile."""

    @property
    def archive_path(self) -> Path:
        return self.out_dir / f"{self.run_id}.tar.gz"

    @property
    def spool_path(self) -> Path:
        return self.out_dir / f"{self.run_id}.spool"


@dataclass(frozen=True)
class RunResult:
    """What the summary and the caller need."""

    exit_code: int
    archive: Path
    spool: Path
    normalized: NormalizedRun
    elapsed: float
    """The command's run length: the spool's `run_started` to `command_exited` stamps, the length
    `show` gives too (the runner's own set-up and publishing are in the `run.after_exit` log)."""
    marks: dict[str, float] = field(default_factory=dict)
    """Monotonic seconds of the run's steps (`started`, `exited`, ...) and its final counts
    (`drops`, `untracked`): the daemon's metrics."""


def execute(req: RunRequest) -> RunResult:
    """Run the command under observation and write its archive.

    `--out` is opened once, here, and the spool and the archive are made
    through that directory fd (spool/dirfd.py): what happens to the path
    during the run changes nothing the runner writes. SIGINT, SIGTERM and
    SIGHUP are handled from the first step to the last (interrupt.py).
    """
    with Interruptions(req.forward_first_signal, final=req.exit_after) as interrupts:
        enforcement = enforce.prepare(req.policy, req.allow_compat_syscalls)  # fails before anything exists
        out_fd = open_dir(req.out_dir)
        live: list[LivePass] = []
        marks: dict[str, float] = {}
        try:
            spool_name, trailer = _capture(req, enforcement, out_fd, interrupts, live, marks)
            interrupts.enter_publish()
            code = run_exit_code(trailer.exit_code, trailer.ended_by)
            try:
                normalized, how = _normalized(req, out_fd, spool_name, live[0] if live else None)
                marks["normalized"] = time.monotonic()
                publish(normalized, req.archive_path, out_fd, sync=not req.staged)
                interrupts.published()
                marks["published"] = time.monotonic()
                _log_after_exit(marks, how, live[0] if live else None)
            except OSError as exc:
                raise RunnerError(
                    f"cannot write the archive {req.archive_path}: {exc.strerror or exc}; the command exited "
                    f"{code}; its spool {req.spool_path} is complete: rebuild the archive with "
                    f"'assay-runner normalize {req.spool_path}' once there is room (no archive was replaced)",
                    code) from exc
        finally:
            for pass_ in live:
                pass_.close()
            os.close(out_fd)
    return RunResult(code, req.archive_path, req.spool_path, normalized, marks["exited"] - marks["started"],
                     marks)


def _normalized(req: RunRequest, out_fd: int, spool_name: str,
                live: LivePass | None) -> tuple[NormalizedRun, str]:
    """The run normalized, and by which pass: the live one's result (runner/capture/live.py,
    `live`), or the finished spool's (`offline`, `offline_dac`, `offline_live_failed`).

    The finished spool is normalized again when the live pass failed, or when
    the command's permission verdicts (asked now, as its user) can change stage A.
    `req.on_spool_final` is called as soon as nothing more will be added to the
    spool: once stage A showed there is nothing to ask, or after the verdicts.
    """
    how = "offline"
    if live is not None:
        questions = live.dac_questions()  # waits for the live pass's stage A
        if questions is None:
            how = "offline_live_failed"
        elif _unprivileged(req.user) and questions:
            how = "offline_dac"
        else:
            _spool_final(req)
            run = live.result()
            if run is not None:
                return run, "live"
            return normalize(_finished_spool(out_fd, spool_name), req.run_id), "offline_live_failed"
        live.close()  # its stage B is of no use now: the CPU goes to the offline pass
    spool = _with_dac_verdicts(_finished_spool(out_fd, spool_name), out_fd, spool_name, req.user)
    _spool_final(req)
    return normalize(spool, req.run_id), how


def _finished_spool(out_fd: int, spool_name: str) -> Spool:
    """The published spool, read through the directory we hold (not the path's current target)."""
    return read_spool(Path(f"/proc/self/fd/{out_fd}") / spool_name)


def _spool_final(req: RunRequest) -> None:
    if req.on_spool_final is not None:
        req.on_spool_final()


def _capture(req: RunRequest, enforcement: enforce.Enforcement, out_fd: int,
             interrupts: Interruptions, live: list[LivePass],
             marks: dict[str, float]) -> tuple[str, SpoolTrailer]:
    """Cgroup, the run's source, spawn, drain into the spool; the published spool's name and its trailer.

    With live normalization on, the pass that follows the spool is appended to `live` (the caller
    closes it). `marks` gets the times of the steps after the command exits (`_log_after_exit`).
    """
    cgroup = RunCgroup.create(req.run_id, claim(req.out_dir, out_fd, req.spool_path.name))
    limits: LimitGroups | None = None
    source: RunSource | None = None
    spooler: Spooler | None = None
    sdk = SdkServer(req.policy.tool_decision if req.policy else None)
    rules, guard = enforcement.syscalls, None
    try:
        if enforcement.machine is not None:
            guard = Guard(rules, enforcement.machine)
        limits = LimitGroups.create(cgroup, req.limits)
        interrupts.check_setup()
        source = (req.sensor or LocalSensor(req.ringbuf_pages)).open(cgroup, enforcement.net)
        interrupts.check_setup()
        spec = CommandSpec(req.exe, req.argv, str(req.workdir), {**req.env, **sdk.env()},
                           keep_fds=(sdk.child_fd,), ruleset=enforcement.ruleset,
                           seccomp=guard.handover if guard else None,
                           user=req.user, isolate_net=req.isolate_net, stdio=req.stdio,
                           caller=req.caller)
        sdk.start()
        spawned = _spawn(spec, cgroup, limits)
        sdk.close_child_end()
        if guard is not None:
            guard.start()
        enforcement.close()
        spooler = _open_spool(req, out_fd, SpoolHeader(
            format=SPOOL_FORMAT, run_id=req.run_id, argv=[escape_os(a) for a in req.argv],
            workdir=escape_os(str(req.workdir)),
            control_pids=[spawned.helper_pid], shim_pid=spawned.shim_pid,
            ringbuf_pages=req.ringbuf_pages, uid=req.user.uid if req.user else os.geteuid(),
            policy=req.policy, cgroup_path=cgroup.hierarchy_path,
        ))
        in_process = req.sensor is None or isinstance(req.sensor, LocalSensor)
        if (pass_ := start_live(spooler, req.run_id, ring_in_process=in_process)) is not None:
            live.append(pass_)
        interrupts.check_setup()
        interrupts.phase = "command"
        exit_code, ended_by = capture(source, spooler, spawned, cgroup, sdk,
                                      req.control or TerminalControl(), req.on_start, interrupts)
        for pass_ in live:
            pass_.hurry()
            marks["live_behind"] = spooler.records - pass_.records_read
        marks["started"] = spooler.stamps["run_started"] / 1e9
        marks["exited"] = spooler.stamps["command_exited"] / 1e9
        marks["drained"] = time.monotonic()
        counters = source.counters()
        marks["drops"], marks["untracked"] = sum(counters.drops.values()), counters.untracked
        trailer = SpoolTrailer(
            exit_code=exit_code, drops=counters.drops, emitted=counters.emitted,
            untracked_tasks=counters.untracked, ended_by=ended_by, limits=dict(limits.applied),
            hooks_missing=counters.hooks_missing, path_source=counters.path_source,
            limits_hit=limits.events(), limits_unavailable=list(limits.unavailable),
            refused_syscalls=guard.finish() if guard else {}, compat_syscalls_allowed=not rules.refuse_compat,
        )
        try:
            name = spooler.finish(trailer, sync=not req.staged)
        except SpoolReplaced as exc:
            raise RunnerError(f"evidence tampered with: {exc}; no archive was written") from exc
        except SpoolWriteFailed as exc:
            kept, spooler = spooler.partial_name, None  # whole frames only: kept for a later look
            code = run_exit_code(exit_code, ended_by)
            raise RunnerError(
                f"cannot write the spool in {req.out_dir}: {exc} ({exc.unwritten} records were not written); "
                f"the command exited {code}; {kept} keeps the whole frames written before (once there is "
                f"room: assay-runner normalize {req.out_dir / kept}); no archive was written or replaced",
                code) from exc.error
        spooler = None
        marks["spooled"] = time.monotonic()
        return name, trailer
    finally:
        sdk.stop()
        if guard is not None:
            guard.close()
        if spooler is not None:
            spooler.discard()
        try:
            cgroup.remove()
        finally:
            for pass_ in live:
                pass_.settle()  # the monitor's detach forks: not while the pass imports
            if source is not None:
                source.close()  # after the cgroup emptied: no task of the run is left to track
            if limits is not None:
                limits.remove()
            marks["cleaned_up"] = time.monotonic()


def _spawn(spec: CommandSpec, cgroup: RunCgroup, limits: LimitGroups) -> Spawned:
    """`spawn`, and when the kernel refused it, which of the run's limits did (a memory limit below
    what one process needs kills the helper as it joins the cgroup, before it can say why)."""
    try:
        return spawn(spec, cgroup, limits.procs_files)
    except RunnerError as exc:
        hit = limits.events()
        if not hit:
            raise
        applied = " ".join(f"{k}={v}" for k, v in sorted(dict(limits.applied).items()))
        said = " ".join(f"{k}={v}" for k, v in sorted(hit.items()))
        raise RunnerError(f"{exc}; the run's cgroup limits refused it ({said}; limits: {applied}): "
                          "a limit this low leaves no room to start any process") from exc


def _open_spool(req: RunRequest, out_fd: int, header: SpoolHeader) -> Spooler:
    """The spool's partial file, created new in `out_fd`; a name already there is refused."""
    try:
        return Spooler(out_fd, req.spool_path.name, header)
    except FileExistsError as exc:
        raise RunnerError(f"{req.spool_path}.partial appeared before the run could create it: "
                          "refusing to write through it") from exc
    except OSError as exc:
        raise RunnerError(f"cannot write the spool in {req.out_dir}: {exc.strerror or exc}; the command "
                          "was not started and nothing was written") from exc


def _log_after_exit(marks: dict[str, float], how: str, live: LivePass | None) -> None:
    """Where the time after the command's exit went, step by step (seconds; docs/benchmarks.md),
    and the live process's own CPU seconds and peak memory (MiB), which are not the runner's, and
    the runner's own peak memory (its VmHWM, publishing done; GNU time's `%M` is the largest of
    the processes)."""
    steps = ("exited", "drained", "spooled", "cleaned_up", "normalized", "published")
    log.info("run.after_exit", normalized_by=how, total_s=round(marks["published"] - marks["exited"], 3),
             live_behind_records=marks.get("live_behind"), live_cpu_s=live.cpu_s if live else None,
             live_peak_rss_mib=live.peak_rss_mib if live else None,
             runner_peak_rss_mib=round(peak_rss_kib() / 1024, 1),
             **{f"{b}_s": round(marks[b] - marks[a], 3) for a, b in itertools.pairwise(steps)})


def _unprivileged(user: Credentials | None) -> bool:
    """The command ran as another user than root: its failed opens get permission verdicts."""
    return user is not None and user.uid != 0


def _with_dac_verdicts(spool: Spool, out_fd: int, name: str, user: Credentials | None) -> Spool:
    """Add permission verdicts for policy-refused failed opens of a non-root command."""
    questions = dac_questions(spool) if _unprivileged(user) else []
    if not questions or user is None:  # no questions without a user
        return spool
    verdicts = DacVerdicts(allowed=check_as(user, questions))
    Spooler.append(out_fd, name, verdicts)
    return msgspec.structs.replace(spool, dac={**spool.dac, **verdicts.allowed})
