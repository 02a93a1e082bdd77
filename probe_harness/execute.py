"""`probe-exec MODE PROBE`: run probes in a run mode and collect their records.

A probe is run directly (its environment from `modes.probe_env`, its working
directory the workspace) and must exit 0 having printed exactly one JSON
object that validates. Under a runner mode or a wrapper, all probes of one
batch run inside ONE sandboxed driver (`probe-exec --in-sandbox`): starting
the runner costs a BCC compile, so one run per mode keeps the matrix fast,
and the records stay one object each. The driver writes one envelope line per
probe (`{"probe", "record"}` or `{"probe", "error"}`); the outer side
validates every record again, because nothing that ran in the sandbox is
trusted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probe_harness import PROBES_DIR
from probe_harness.contracts import ContractError, Contracts, load_contracts
from probe_harness.modes import (
    BASELINE,
    BIN_DIR,
    EXTERNAL,
    ModeError,
    Settings,
    check_modes,
    parse_wrapper,
    probe_env,
)

PROBE_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 300.0

RUNNER_OUT = Path("/var/lib/assay-runner/runs")
"""Where the runner writes the archives of sandboxed batches: its own default --out, which a
sandboxed probe cannot write (the runner refuses an --out the command could change, and the
matrix's --out usually lies in a tree the workspace-write preset lets it write)."""


class ProbeError(ValueError):
    """A probe cannot be run as asked (unknown, outside probes/, not executable)."""


@dataclass
class Result:
    """One probe run in one mode: its record, or why there is none."""

    probe: str
    mode: str
    record: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Batch:
    """The results of one batch, and the runner archive when a runner mode ran it."""

    mode: str
    results: list[Result]
    archive: Path | None = None
    run_id: str | None = None


def resolve_probe(ident: str, probes_dir: Path = PROBES_DIR) -> Path:
    """DIR/ID.sh for an id, or a path; only executable scripts directly in the probes directory."""
    candidate = Path(ident) if ("/" in ident or ident.endswith(".sh")) else probes_dir / f"{ident}.sh"
    path = candidate.resolve()
    if path.parent != probes_dir.resolve() or path.suffix != ".sh":
        raise ProbeError(
            f"{ident}: not a probe: probes are {probes_dir}/<probe_id>.sh (another directory: --probes-dir)"
        )
    if not path.is_file():
        raise ProbeError(f"{ident}: no such probe ({path})")
    if not os.access(path, os.X_OK):
        raise ProbeError(f"{ident}: {path} is not executable (chmod +x)")
    return path


def all_probes(probes_dir: Path = PROBES_DIR) -> list[Path]:
    """Every probe script, sorted by id."""
    return sorted(p for p in probes_dir.glob("*.sh") if p.is_file())


def check_record(record: Any, probe: str, mode: str, contracts: Contracts) -> str | None:
    """Why a probe's record is not acceptable for this probe and mode (None when it is)."""
    problems = contracts.problems(record)
    if problems:
        return "record does not validate: " + "; ".join(problems)
    if record["probe"]["id"] != probe:
        return f"record names probe {record['probe']['id']!r}, expected {probe!r}"
    if record["run"]["mode"] != mode:
        return f"record names run mode {record['run']['mode']!r}, expected {mode!r}"
    return None


def parse_stdout(stdout: str) -> tuple[Any, str | None]:
    """The one JSON object a probe printed, or why its stdout is not exactly that."""
    lines = stdout.splitlines()
    if len(lines) != 1:
        return None, f"printed {len(lines)} lines on stdout, expected exactly one JSON object"
    try:
        value = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        return None, f"stdout is not JSON: {exc}"
    if not isinstance(value, dict):
        return None, "stdout is JSON but not an object"
    return value, None


def run_direct(path: Path, mode: str, settings: Settings, contracts: Contracts) -> Result:
    """Run one probe here and now, with the probe environment of `mode`."""
    probe = path.stem
    try:
        done = subprocess.run(
            [str(path)],
            env=probe_env(mode, settings),
            cwd=settings.workspace,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Result(probe, mode, error=f"timed out after {PROBE_TIMEOUT_S:.0f} s")
    except OSError as exc:
        return Result(probe, mode, error=f"cannot execute: {exc.strerror}")
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        return Result(probe, mode, error=f"exited {done.returncode}: {tail[0][:300]}")
    record, why = parse_stdout(done.stdout)
    if why is None:
        why = check_record(record, probe, mode, contracts)
    return Result(probe, mode, record if why is None else None, why)


@contextlib.contextmanager
def prepared_workspace(settings: Settings) -> Iterator[None]:
    """Check the workspace and create its TMPDIR before any sandbox starts (a read-only
    sandbox could not); remove the TMPDIR afterwards if this created it and probes left it empty."""
    if not settings.workspace.is_dir():
        raise ProbeError(f"workspace {settings.workspace} is not a directory: pass --workspace DIR")
    created = not settings.tmpdir.exists()
    settings.tmpdir.mkdir(exist_ok=True)
    try:
        yield
    finally:
        if created:
            with contextlib.suppress(OSError):
                settings.tmpdir.rmdir()


def _inner_command(mode: str, probes: list[Path], settings: Settings) -> list[str]:
    return [
        str(BIN_DIR / "probe-exec"),
        "--in-sandbox",
        "--workspace",
        str(settings.workspace),
        "--catalog",
        str(settings.catalog),
        "--boundary",
        str(settings.boundary),
        "--probes-dir",
        str(settings.probes_dir),
        mode,
        *(str(p) for p in probes),
    ]


def _sandboxed(mode: str, probes: list[Path], settings: Settings) -> tuple[list[str], str | None]:
    """The command that runs the driver in `mode`, and the runner's run id if any."""
    inner = _inner_command(mode, probes, settings)
    if mode == EXTERNAL:
        return [*settings.wrapper_argv(), *inner], None
    run_id = f"probe-{mode}-{secrets.token_hex(4)}"
    runner = [
        str(BIN_DIR / "assay-runner"),
        "--log-format",
        "json",
        "run",
        "--sandbox",
        mode,
        "--out",
        str(RUNNER_OUT),
        "--run-id",
        run_id,
        "--workdir",
        str(settings.workspace),
        "--",
    ]
    return [*runner, *inner], run_id


def _from_envelopes(stdout: str, mode: str, probes: list[Path], contracts: Contracts) -> dict[str, Result]:
    found: dict[str, Result] = {}
    wanted = {p.stem for p in probes}
    for line in stdout.splitlines():
        try:
            env = json.loads(line)
            name = env["probe"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # not an envelope: output the wrapper itself wrote
        if name not in wanted or name in found:
            continue
        if env.get("error") is not None:
            found[name] = Result(name, mode, error=str(env["error"]))
        else:
            why = check_record(env.get("record"), name, mode, contracts)
            found[name] = Result(name, mode, env["record"] if why is None else None, why)
    return found


def run_batch(mode: str, probes: list[Path], settings: Settings, contracts: Contracts) -> Batch:
    """Run `probes` in `mode`: directly for baseline, else inside one sandboxed driver."""
    contracts = contracts.for_mode(mode)
    settings = dataclasses.replace(settings, boundary=contracts.boundary.path)
    if mode == BASELINE:
        return Batch(mode, [run_direct(p, mode, settings, contracts) for p in probes])
    cmd, run_id = _sandboxed(mode, probes, settings)
    log_path = settings.out / f"{run_id or f'external-{secrets.token_hex(4)}'}.log"
    settings.out.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            done = subprocess.run(
                cmd,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                errors="replace",
                env=dict(settings.base_env),
                cwd=settings.workspace,
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
            stdout, code = done.stdout, done.returncode
        except subprocess.TimeoutExpired:
            stdout, code = "", None
        except OSError as exc:
            raise ModeError(f"cannot start {cmd[0]}: {exc.strerror}") from None
    found = _from_envelopes(stdout, mode, probes, contracts)
    why = "timed out" if code is None else f"exited {code}"
    results = [
        found.get(p.stem)
        or Result(p.stem, mode, error=f"no result: the sandboxed driver {why} (log: {log_path})")
        for p in probes
    ]
    archive = RUNNER_OUT / f"{run_id}.tar.gz" if run_id else None
    return Batch(mode, results, archive if archive and archive.is_file() else None, run_id)


def drive_in_sandbox(mode: str, probes: list[Path], settings: Settings, contracts: Contracts) -> int:
    """The driver inside the sandbox: one envelope line per probe, in order."""
    for path in probes:
        result = run_direct(path, mode, settings, contracts)
        envelope = {"probe": result.probe, "record": result.record, "error": result.error}
        sys.stdout.write(json.dumps(envelope) + "\n")
        sys.stdout.flush()
    return 0


def add_common_options(p: argparse.ArgumentParser) -> None:
    """Options shared by probe-exec and probe."""
    p.add_argument(
        "--workspace",
        type=Path,
        help="workspace root the probes see (default: FENCE_WORKSPACE_ROOT, else the current directory)",
    )
    p.add_argument(
        "--catalog", help="capability catalog (default: CATALOG_PATH, then catalogs/defaults.json)"
    )
    p.add_argument(
        "--boundary", help="boundary descriptor (default: BOUNDARY_PATH, then catalogs/defaults.json)"
    )
    p.add_argument(
        "--probes-dir",
        type=Path,
        default=PROBES_DIR,
        help="directory holding the probes, <probe_id>.sh each (default: the harness's probes/)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("probe-runs"),
        help="directory for runner archives, logs and reports (default: probe-runs)",
    )
    p.add_argument(
        "--wrapper",
        help="sandbox wrapper command for mode 'external'; {workspace} is replaced "
        "by the workspace path, e.g. 'bwrap --ro-bind / / --bind {workspace} {workspace}'",
    )


def settings_from(args: argparse.Namespace) -> tuple[Settings, Contracts]:
    """Resolve the contracts and the settings named by the common options."""
    env = dict(os.environ)
    contracts = load_contracts(args.catalog, args.boundary, env)
    workspace = args.workspace or Path(env.get("FENCE_WORKSPACE_ROOT") or os.getcwd())
    settings = Settings(
        workspace.resolve(),
        contracts.catalog.path,
        contracts.boundary.path,
        args.out.resolve(),
        parse_wrapper(args.wrapper),
        env,
        args.probes_dir.resolve(),
    )
    return settings, contracts


def main() -> int:
    """Console script `probe-exec [options] MODE PROBE`."""
    p = argparse.ArgumentParser(
        prog="probe-exec", description="Run one probe in one run mode and print its record."
    )
    add_common_options(p)
    p.add_argument("--in-sandbox", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("mode")
    p.add_argument("probe", nargs="+", help="probe id or path (one; the sandboxed driver takes several)")
    args = p.parse_args()
    try:
        settings, contracts = settings_from(args)
        probes = [resolve_probe(x, settings.probes_dir) for x in args.probe]
        if args.in_sandbox:
            return drive_in_sandbox(args.mode, probes, settings, contracts)
        if len(probes) != 1:
            raise ProbeError("probe-exec runs one probe; use 'probe --target --probe ID ...' for several")
        check_modes([args.mode], contracts.run_modes, settings)
        with prepared_workspace(settings):
            batch = run_batch(args.mode, probes, settings, contracts)
    except (ContractError, ModeError, ProbeError) as exc:
        print(f"probe-exec: error: {exc}", file=sys.stderr)
        return 2
    result = batch.results[0]
    if result.record is None:
        print(f"probe-exec: {result.probe} in mode {result.mode}: {result.error}", file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(result.record, ensure_ascii=False) + "\n")
    return 0
