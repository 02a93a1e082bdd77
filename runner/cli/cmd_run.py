"""`assay-runner run`: observe a command and write its evidence archive."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ebpf.wire import DEFAULT_RINGBUF_PAGES
from normalizer.artifacts import RUN_ID_MAX
from policy.load import PRESETS, PolicyFileError, host_variables, load_policy, load_preset
from policy.model import PolicyError, ResolvedPolicy, resolve
from runner.capture.inputs import check_ringbuf_pages, command_inputs, create_out_dir
from runner.capture.limits import DEFAULT_PIDS_MAX, CgroupLimits
from runner.display import printable
from runner.enforce.identity import command_credentials, effective, identity_env
from runner.errors import EXIT_RUNNER_ERROR, RunnerError
from runner.logs import get_logger

if TYPE_CHECKING:  # the capture side is imported only for direct mode: the daemon client stays light
    from runner.capture.session import RunRequest
    from runner.capture.spawn import Credentials

STATE_DIR = Path("/var/lib/assay-runner")
DEFAULT_OUT = STATE_DIR / "runs"
"""Outside any workspace, and root-owned: a command that is not root cannot write it."""
log = get_logger("run")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run a command under eBPF observation and write its evidence archive",
        description=(
            "Run CMD in a fresh cgroup and pid namespace, trace its opens, connects, "
            "execs and datagram peers in the kernel, and write DIR/RUN_ID.tar.gz "
            "(plus the raw spool DIR/RUN_ID.spool). The command keeps the terminal; "
            "the runner exits with the command's exit code (125: runner error, "
            "126: command not executable, 127: command not found)."
        ),
    )
    p.error = bad_usage  # type: ignore[method-assign]
    add_capture_options(p)
    p.add_argument("--force", action="store_true",
                   help="overwrite an archive of the same run id in --out")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--daemon", dest="mode", action="store_const", const="daemon",
                      help="run through the assay-runner daemon (default when its socket exists)")
    mode.add_argument("--direct", dest="mode", action="store_const", const="direct",
                      help="run in this process (needs root), even when a daemon is there")
    p.add_argument("--socket", metavar="PATH",
                   help="the daemon's socket (default: $ASSAY_RUNNER_SOCKET, "
                        "else /run/assay-runner/runner.sock)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                   help="the command to observe, after '--'")
    p.set_defaults(func=main)


def bad_usage(message: str) -> NoReturn:
    """argparse's errors for `run`: one line and 125 (EXIT_RUNNER_ERROR), as every other bad input to
    `run`, instead of the usage block and 2, a code the observed command can return too."""
    print(printable(f"assay-runner: error: run: {message} (see 'assay-runner run --help')"), file=sys.stderr)
    sys.exit(EXIT_RUNNER_ERROR)


def add_capture_options(p: argparse.ArgumentParser) -> None:
    """Options shared by every command that runs something under the monitor."""
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                   help="directory for archives and spools, created if missing; the command must not "
                        f"be able to write it or any directory leading to it (default: {DEFAULT_OUT})")
    p.add_argument("--run-id", metavar="ID",
                   help=f"run identifier: 1-{RUN_ID_MAX} ASCII letters, digits, '_', '-' "
                        "(default: run-<time>-<rand>)")
    p.add_argument("--workdir", type=Path, metavar="DIR",
                   help="working directory of the command (default: the current directory)")
    p.add_argument("--ringbuf-pages", type=int, default=DEFAULT_RINGBUF_PAGES, metavar="N",
                   help=f"ring buffer size in pages, a power of two (default: {DEFAULT_RINGBUF_PAGES})")
    p.add_argument("--user", metavar="USER",
                   help="run the command as this user (name or uid); under sudo the default is the "
                        "invoking user (SUDO_UID), and '--user root' runs it as root")
    p.add_argument("--net", choices=("host", "isolated"), default="host",
                   help="'isolated': a fresh network namespace with only loopback up (default: host)")
    p.add_argument("--pids-max", type=int, metavar="N",
                   help=f"most tasks (processes and threads) the run may have at once, its cgroup's pids.max "
                        f"(default: {DEFAULT_PIDS_MAX}; 0: no limit); forks past it fail with EAGAIN and the "
                        "archive's health says so. Direct mode: the daemon applies its operator's limits")
    p.add_argument("--memory-max", metavar="SIZE",
                   help="most memory the run may use, its cgroup's memory.max, as bytes or 512M/4G "
                        "(default: no limit); past it the kernel's OOM killer ends tasks and health says so")
    p.add_argument("--allow-compat-syscalls", action="store_true",
                   help="let the command make 32-bit (int $0x80) and x32 syscalls, which no tracepoint sees "
                        "(default: refused with ENOSYS); health then says the kernel layer may miss them")
    policy = p.add_mutually_exclusive_group()
    policy.add_argument("--policy", type=Path, metavar="FILE",
                        help="enforce this policy file (TOML, see 'assay-runner policy check')")
    policy.add_argument("--sandbox", choices=PRESETS,
                        help="enforce a built-in policy preset")


def prepare_out_dir(out: Path, run_id: str, force: bool, user: Credentials | None,
                    policy: ResolvedPolicy | None) -> Path:
    """Make sure the command cannot touch --out, then create it and check it can take the archive.

    The command-safety check comes first, so a refused --out is never created.
    """
    from runner.enforce.outguard import check_out, unconfined_root

    command = effective(user)
    if not unconfined_root(command, policy):  # there, no --out is safe: main() warns
        check_out(out, command, policy)
    return create_out_dir(out, run_id, force)


def run_policy(args: argparse.Namespace, workdir: Path, user: Credentials | None) -> ResolvedPolicy | None:
    """The policy named by --policy or --sandbox, resolved for this run (or None)."""
    if args.policy is None and args.sandbox is None:
        return None
    try:
        doc = load_policy(args.policy) if args.policy is not None else load_preset(args.sandbox)
    except PolicyFileError as exc:
        raise RunnerError(str(exc), exc.exit_code) from None
    variables = host_variables(workdir, uid=user.uid if user else None)
    try:
        return resolve(doc, **variables)
    except ValueError as exc:  # PolicyError names the field
        raise RunnerError(f"policy {doc.name}: {exc}") from exc


def run_limits(args: argparse.Namespace) -> CgroupLimits:
    """--pids-max and --memory-max; what the user asked must be enforceable, the default need not be."""
    from runner.daemon.config import memory_bytes

    pids = getattr(args, "pids_max", None)
    memory = getattr(args, "memory_max", None)
    if pids is not None and pids < 0:
        raise RunnerError(f"--pids-max must be 0 (no limit) or a positive number, got {pids}")
    try:
        memory_max = memory_bytes(memory)
    except PolicyError as exc:  # it names the config key; say the option instead
        raise RunnerError(f"--memory-max: {exc.problem}") from None
    return CgroupLimits(pids_max=DEFAULT_PIDS_MAX if pids is None else (pids or None), memory_max=memory_max,
                        required=pids is not None or memory is not None)


def build_request(args: argparse.Namespace) -> RunRequest:
    """Check every input before anything is created; raise RunnerError on the first problem."""
    from runner.capture.session import RunRequest
    from runner.enforce import prepare as enforce
    from runner.host.checks import require_run_prerequisites

    cmd, run_id, workdir, env, exe = command_inputs(args.cmd, args.run_id, args.workdir)
    pages = check_ringbuf_pages(args.ringbuf_pages)
    user = command_credentials(args.user, env)
    env.update(identity_env(user))
    policy = run_policy(args, workdir, user)
    enforce.check(policy)
    require_run_prerequisites()
    limits = run_limits(args)
    report_stale_cleanup()  # before --out is prepared: a dead run's partial spool there is recovered first
    out = prepare_out_dir(args.out, run_id, getattr(args, "force", False), user, policy)
    return RunRequest(run_id=run_id, exe=exe, argv=cmd, workdir=workdir, out_dir=out,
                      ringbuf_pages=pages, env=env, user=user,
                      isolate_net=args.net == "isolated", policy=policy, limits=limits,
                      allow_compat_syscalls=args.allow_compat_syscalls)


def report_stale_cleanup() -> None:
    """Clean up after runners that died (runner/capture/stale.py) and say what was done, one line each."""
    from runner.capture.stale import sweep

    if os.geteuid() != 0:  # only root can; the run itself will say root is needed
        return
    for line in sweep():
        print(printable(f"assay-runner: {line}"), file=sys.stderr)


def use_daemon(args: argparse.Namespace) -> bool:
    """--daemon / --direct, else the daemon whenever its socket exists."""
    from runner.daemon.client import socket_path

    mode = getattr(args, "mode", None)
    return mode == "daemon" or (mode is None and socket_path(args).exists())


def main(args: argparse.Namespace) -> int:
    if use_daemon(args):
        from runner.daemon.client import run_via_daemon

        return run_via_daemon(args)
    from runner.capture.session import execute
    from runner.capture.sources import LocalSensor
    from runner.capture.status import summary
    from runner.enforce.outguard import unconfined_root

    out_existed = os.path.isdir(args.out)  # never raises, even where we may not look
    req = build_request(args)
    sensor = LocalSensor(req.ringbuf_pages).preload()  # the inputs are good: load while the rest starts
    try:
        if unconfined_root(effective(req.user), req.policy):
            log.warning("run.evidence_unprotected", out=str(req.out_dir),
                        hint="the command runs as root with no policy restricting writes, so it could "
                             "change --out; pass --user, or a policy whose write trees exclude --out")
        log.info("run.start", run_id=req.run_id, argv=req.argv, workdir=str(req.workdir))
        result = execute(dataclasses.replace(req, sensor=sensor, exit_after=True))
    except BaseException:
        if not out_existed:  # leave no empty --out behind when the run never got going
            with contextlib.suppress(OSError):
                req.out_dir.rmdir()
        raise
    finally:
        sensor.discard()  # unloads the monitor if the run ended before taking it
    print(summary(result.normalized, result.exit_code, result.elapsed, str(result.archive)),
          file=sys.stderr)
    return result.exit_code
