"""Start the command inside the run's cgroup and a fresh pid namespace.

    runner ──fork──▶ helper (joins the cgroup, unshares CLONE_NEWPID)
                        └─fork─▶ init (pid 1 of the namespace; waits for "go")
                                   └─fork─▶ command (chdir, close fds, exec)

The helper joins the cgroup before anything it creates exists, so every task
of the run is inside the cgroup before it can exec; with `--net isolated` it
also moves into a fresh network namespace with only loopback up. The
command's process applies the Landlock ruleset and the seccomp filter,
and drops to `--user`'s credentials last, right before exec. The init is a small shim
rather than the command itself, because a namespace's pid 1 ignores signals
it has no handler for: the shim forwards SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 to
the command, lets the terminal's SIGINT/SIGQUIT reach it directly, and exits
with the command's status, which tears the namespace (and any process left
behind) down. The runner sends "go" only once the monitor is attached and the
spool header is written. Every helper dies with its parent (PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from ebpf.loader import memlock_before
from runner.capture.cgroup import RunCgroup
from runner.display import printable
from runner.enforce.identity import Credentials
from runner.enforce.landlock import Ruleset
from runner.enforce.seccomp_notify import Handover
from runner.errors import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_RUNNER_ERROR, RunnerError

CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_libc = ctypes.CDLL(None, use_errno=True)


def exit_code(status: int) -> int:
    """Shell convention: the exit code, or 128+N when signal N ended the process."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(frozen=True)
class CallerProcess:
    """What the command takes from the daemon's caller rather than from the daemon.

    `cwd_fd` is the directory the caller opened as its working directory: the
    command enters `cwd` by path only after dropping to the caller's ids and
    must land on this very directory, so it never gets a working directory
    its caller could not reach (and the traced chdir names it). `rlimits`
    are (resource, soft, hard) as the caller had them; the command never gets
    more than the daemon's own hard limit either.
    """

    cwd_fd: int
    umask: int
    rlimits: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class CommandSpec:
    """Everything the command's process needs to become the command."""

    exe: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    keep_fds: tuple[int, ...] = ()
    ruleset: Ruleset | None = None
    seccomp: Handover | None = None
    """The syscall filter to install (runner/enforce/seccomp.py) and where to send its notification fd."""
    user: Credentials | None = None
    isolate_net: bool = False
    stdio: tuple[int, int, int] | None = None
    """stdin, stdout, stderr for the command (default: the runner's own)."""
    caller: CallerProcess | None = None
    """The daemon's caller's process attributes; None in direct mode (the command inherits ours)."""


@dataclass
class Spawned:
    """The started helper; the command waits for `start()`."""

    helper_pid: int
    shim_pid: int
    _go_fd: int
    exit_fd: int | None = None
    """A pidfd of the helper: readable once it (and so the command) exited."""

    def start(self) -> None:
        """Let the init fork and exec the command."""
        os.write(self._go_fd, b"g")
        os.close(self._go_fd)

    def poll(self) -> int | None:
        """The command's exit code once it (and so the helper) has exited."""
        pid, status = os.waitpid(self.helper_pid, os.WNOHANG)
        if not pid:
            return None
        if self.exit_fd is not None:
            os.close(self.exit_fd)
            self.exit_fd = None
        return exit_code(status)

    def signal(self, signum: int) -> None:
        """Forward `signum` to the command through the init (it forwards FORWARDED signals)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.shim_pid, signum)


def spawn(spec: CommandSpec, cgroup: RunCgroup, also_join: tuple[Path, ...] = ()) -> Spawned:
    """Fork the helper chain; returns once the init exists and waits for "go".

    `also_join` are further `cgroup.procs` files the helper enters first (the
    per-run limit cgroups of controllers a hybrid host keeps on cgroup v1).
    """
    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    helper = os.fork()
    if helper == 0:  # pragma: no cover - runs in the child
        os.close(report_r)
        os.close(go_w)
        _helper(report_w, go_r, spec, cgroup, also_join)
    os.close(report_w)
    os.close(go_r)
    with os.fdopen(report_r, "rb") as report:
        line = report.read().decode(errors="replace")
    if not line.startswith("ok "):
        _, status = os.waitpid(helper, 0)
        os.close(go_w)
        reason = line.removeprefix("err ") or f"its helper process {_ended(status)} before it could say why"
        raise RunnerError(f"cannot start the command's namespace: {reason}")
    return Spawned(helper_pid=helper, shim_pid=int(line.split()[1]), _go_fd=go_w,
                   exit_fd=os.pidfd_open(helper))


def _ended(status: int) -> str:
    """How a process ended, in words (`was killed by SIGKILL`, `exited with status 1`)."""
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def _helper(report_w: int, go_r: int, spec: CommandSpec, cgroup: RunCgroup,
            also_join: tuple[Path, ...]) -> None:
    """Runs in the helper process; never returns."""
    try:
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        for procs in also_join:
            procs.write_text(f"{os.getpid()}\n")
        cgroup.add(os.getpid())
        if spec.isolate_net:
            isolate_network()
        _unshare(CLONE_NEWPID, "CLONE_NEWPID")
        shim = os.fork()
        if shim == 0:
            os.close(report_w)
            _shim(go_r, spec)
        os.close(go_r)
        os.write(report_w, f"ok {shim}".encode())
        os.close(report_w)
        _, status = os.waitpid(shim, 0)
        os._exit(exit_code(status))
    except BaseException as exc:  # report anything, then leave without cleanup handlers
        try:
            os.write(report_w, f"err {exc}".encode())
        finally:
            os._exit(EXIT_RUNNER_ERROR)


def _unshare(flag: int, name: str) -> None:
    if _libc.unshare(flag) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare({name}): {os.strerror(err)}")


def isolate_network() -> None:
    """Move the calling process into a new network namespace with only loopback, up."""
    from pyroute2 import IPRoute

    _unshare(CLONE_NEWNET, "CLONE_NEWNET")
    with IPRoute() as ipr:
        (lo,) = ipr.link_lookup(ifname="lo")
        ipr.link("set", index=lo, state="up")


def _shim(go_r: int, spec: CommandSpec) -> None:
    """pid 1 of the namespace: fork the command on "go", forward signals, reap."""
    try:
        _die_with_parent()
        if os.read(go_r, 1) != b"g":
            os._exit(EXIT_RUNNER_ERROR)
        os.close(go_r)
        command = os.fork()
        if command == 0:
            _exec_command(spec)
        for signum in FORWARDED:
            signal.signal(signum, lambda s, _f: os.kill(command, s))
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == command:
                os._exit(exit_code(status))
    except BaseException:
        os._exit(EXIT_RUNNER_ERROR)


def _exec_command(spec: CommandSpec) -> None:
    """In the command's process: restore signals, confine, drop privileges, exec."""
    try:
        for signum in (signal.SIGINT, signal.SIGQUIT, *FORWARDED):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        if (memlock := memlock_before()) is not None:  # lifted for the monitor's maps, not the command's
            resource.setrlimit(resource.RLIMIT_MEMLOCK, memlock)
        if spec.caller is not None:
            _take_callers_process(spec.caller)
        else:
            os.chdir(spec.cwd)
        if spec.ruleset is not None:
            spec.ruleset.restrict_self()
        if spec.seccomp is not None:  # while still root: no no_new_privs of its own needed
            spec.seccomp.apply()
        if spec.user is not None:
            os.setgroups(list(spec.user.groups))
            os.setresgid(spec.user.gid, spec.user.gid, spec.user.gid)
            os.setresuid(spec.user.uid, spec.user.uid, spec.user.uid)
        if spec.stdio is not None:
            for target, fd in enumerate(spec.stdio):
                os.dup2(fd, target)
        if spec.caller is not None:  # after stdio: a failure here is said on the caller's stderr
            _enter_callers_cwd(spec.cwd, spec.caller.cwd_fd)
        _close_fds_except(spec.keep_fds)
        os.execve(spec.exe, spec.argv, spec.env)
    except FileNotFoundError as exc:
        os.write(2, printable(f"assay-runner: cannot execute {spec.exe}: {exc.strerror}").encode() + b"\n")
        os._exit(EXIT_NOT_FOUND)
    except BaseException as exc:
        os.write(2, printable(f"assay-runner: cannot execute {spec.exe}: {exc}").encode() + b"\n")
        os._exit(EXIT_NOT_EXECUTABLE)


def _take_callers_process(caller: CallerProcess) -> None:
    """The caller's umask and resource limits (never above the daemon's hard limits)."""
    os.umask(caller.umask & 0o777)
    for which, soft, hard in caller.rlimits:
        cap = _lower(hard, resource.getrlimit(which)[1])
        resource.setrlimit(which, (_lower(soft, cap), cap))


def _lower(a: int, b: int) -> int:
    """The smaller limit, RLIM_INFINITY being the largest."""
    if a == resource.RLIM_INFINITY:
        return b
    return a if b == resource.RLIM_INFINITY else min(a, b)


def _enter_callers_cwd(cwd: str, fd: int) -> None:
    os.chdir(cwd)
    here, opened = os.stat("."), os.fstat(fd)
    if (here.st_dev, here.st_ino) != (opened.st_dev, opened.st_ino):
        raise OSError(f"{cwd} is no longer the directory the client opened")


def _close_fds_except(keep: tuple[int, ...]) -> None:
    """Close every inherited fd above stderr but `keep` (BPF maps must not leak)."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
