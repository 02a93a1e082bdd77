"""`make kernel-matrix`: the monitor on the kernels people run, each booted for real.

    .venv/bin/python scripts/kernel_matrix.py [--kernels host,debian-5.10,debian-6.1,debian-6.12]
                                              [--tests smoke|full] [--json FILE]

`host` runs on this machine's own kernel; every other name is a Debian kernel
(scripts/guest_kernels.sh fetches and unpacks it) booted with virtme-ng over
this machine's filesystem, under TCG emulation (KVM where it works is not
assumed: on a Firecracker host it does not). In each, the same inner step
(`--inside`) runs `doctor`, probes the monitor's hooks (ebpf/probing.py),
measures start-to-exec once the compiled monitor is cached, and runs a
subset of the kernel tests; its row comes back as JSON through a directory
shared with the guest. The table has one row per kernel: its release, the
tracepoints attached, the hooks missing (absent-by-kernel, which is no loss,
and lost), the tests passed and failed, and start-to-exec. Exit 0 only when
every kernel booted, doctor's BPF check passed, nothing was lost and no test
failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
KERNELS = ("host", "debian-5.10", "debian-6.1", "debian-6.12")
SMOKE = ("tests/test_run_kernel.py", "tests/test_kernel_path_kernel.py", "tests/test_witness_kernel.py",
         "tests/test_netpolicy_rules_kernel.py")
"""One observed run: its exec, open, write and connect lines, health, validation, under a small
locked-memory limit; one file opened under five names, files on an overlayfs, and the path each
line names (kernel paths where the kernel offers them); a git + python job under strace, every
call it saw one line; the network policy's programs loaded, each edge of its rules given the
policy model's verdict."""
TESTS = {
    "smoke": SMOKE,
    "full": (*SMOKE, "tests/test_fs_ops_kernel.py",
             "tests/test_observe_kernel.py::test_command_log_equals_what_strace_saw"),
}
"""Kernel tests each kernel runs: `full` adds the strace witnesses of file operations and execs."""
GUEST_MEMORY = "2G"
GUEST_TIMEOUT_S = 3600


@dataclass
class Row:
    """One kernel's result."""

    kernel: str
    release: str = ""
    bpf_ok: bool = False
    attached: int = 0
    absent_by_kernel: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    passed: int = 0
    failed: int = 0
    start_to_exec_s: float | None = None
    hooks_note: str = ""
    path_source: str = ""
    """`kernel` or `user_memory`: the run's `s2_path_source` note (ebpf/kpaths.py)."""
    """The `s2_kernel_hooks` health note of a run on this kernel (empty: every hook attached)."""
    archive_valid: bool = False
    """That run's archive passes the contract and Assay's rules (runner/evidence/validate.py)."""
    seconds: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        return (not self.error and self.bpf_ok and self.archive_valid and not self.lost and not self.failed
                and self.passed > 0)


def inside(name: str, modules: str | None, tests: list[str], result: Path) -> None:
    """The step run on the kernel under test (natively, or as a guest's command); writes `result`."""
    t0 = time.monotonic()
    row = Row(kernel=name, release=os.uname().release)
    try:
        basetemp = None
        if modules:
            _link_modules(Path(modules), row.release)
            basetemp = _guest_tmpfs()
        _measure(row, tests, result.parent, basetemp)
    except Exception as exc:  # the row says what broke; the caller reports it
        row.error = f"{type(exc).__name__}: {exc}"
    row.seconds = round(time.monotonic() - t0, 1)
    result.write_text(json.dumps(asdict(row)))


def _link_modules(moddir: Path, release: str) -> None:
    """Make the guest's /lib/modules/<release> the unpacked kernel's (its headers for BCC).

    The guest sees the host's /lib/modules, which lacks this kernel: a tmpfs over it, in the
    guest only, holds one link to the unpacked tree.
    """
    if Path("/lib/modules", release).exists():
        return
    subprocess.run(["mount", "-t", "tmpfs", "guest-modules", "/lib/modules"], check=True)
    Path("/lib/modules", release).symlink_to(moddir)


def _guest_tmpfs() -> Path:
    """A tmpfs for the tests' files in a guest: its /tmp is an overlay on 9p, which has no file
    handles (so name_to_handle_at fails and tests/programs/fs_ops.py skips open_by_handle_at)."""
    folder = Path("/run/kernel-matrix-tmp")
    folder.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "kernel-matrix-tmp", folder], check=True)
    return folder


def _measure(row: Row, tests: list[str], work: Path, basetemp: Path | None) -> None:
    sys.path.insert(0, str(ROOT))
    from ebpf.monitor import hook_plan  # the worktree's, on the kernel under test

    doctor = subprocess.run([VENV / "bin/assay-runner-py", "doctor", "--json"],
                            capture_output=True, text=True)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]} if doctor.stdout.strip() else {}
    row.bpf_ok = bool(checks.get("bpf", {}).get("ok"))
    if not row.bpf_ok:
        row.error = f"doctor: {checks.get('bpf', {}).get('detail') or doctor.stderr.strip()[-300:]}"
    plan = hook_plan()
    row.attached, row.absent_by_kernel, row.lost = len(plan.attached), plan.absent, plan.lost
    row.start_to_exec_s = _start_to_exec(row, work)
    if tests:
        row.passed, row.failed = _pytest(tests, work / f"{row.kernel}-junit.xml", basetemp)


def _start_to_exec(row: Row, work: Path) -> float:
    """Realtime from spawning `assay-runner run` to its command running, with the monitor cached
    (a first, uncounted run compiles it); the last run's archive gives the row its health note."""
    from runner.evidence.archive import read_archive
    from runner.evidence.validate import validate_members

    out = Path(tempfile.mkdtemp(prefix="matrix-out-", dir=work))
    latency = 0.0
    for attempt in range(2):
        start = time.time_ns()
        proc = subprocess.run([VENV / "bin/assay-runner", "run", "--out", out, "--run-id",
                               f"matrix-s2e-{attempt}", "--force", "--", "/bin/date", "+%s%N"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"run failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
        latency = (int(proc.stdout.split()[0]) - start) / 1e9
    members = read_archive(out / "matrix-s2e-1.tar.gz")
    row.archive_valid = validate_members(members) == []
    notes = json.loads(members["observation-health.json"])["notes"]
    row.hooks_note = next((n for n in notes if n.startswith("s2_kernel_hooks:")), "")
    source = next((n for n in notes if n.startswith("s2_path_source: ")), "")
    row.path_source = source.partition("path_source=")[2].split(" ")[0]
    shutil.rmtree(out, ignore_errors=True)
    return round(latency, 3)


def _pytest(tests: list[str], junit: Path, basetemp: Path | None) -> tuple[int, int]:
    """(passed, failed or errored) of `tests`, read from pytest's JUnit report."""
    extra = [f"--basetemp={basetemp / 'pytest'}"] if basetemp else []
    with open(junit.with_suffix(".log"), "w") as log:
        subprocess.run([VENV / "bin/pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *extra,
                        *tests], cwd=ROOT, check=False, stdout=log, stderr=subprocess.STDOUT)
    passed = failed = 0
    for case in ET.parse(junit).iter("testcase"):
        outcome = {child.tag for child in case}
        if outcome & {"failure", "error"}:
            failed += 1
        elif "skipped" not in outcome:
            passed += 1
    return passed, failed


def prepare(names: list[str]) -> dict[str, tuple[str, Path]]:
    """name -> (abi, unpacked dir) of each guest kernel, fetched by scripts/guest_kernels.sh."""
    if not names:
        return {}
    proc = subprocess.run(["bash", ROOT / "scripts/guest_kernels.sh", *names], capture_output=True, text=True)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or ["setup failed"]
        raise SystemExit(f"kernel-matrix: {last[0]}")
    out = {}
    for line in proc.stdout.splitlines():
        name, abi, folder = line.split(" ", 2)
        out[name] = (abi, Path(folder))
    return out


def boot(name: str, abi: str, folder: Path, tests: list[str], shared: Path) -> Row:
    """Run the inner step in a guest booted on `name`'s kernel; its row, or one saying why not."""
    root = folder / "root"
    result = shared / f"{name}.json"
    # the host's PATH, not virtme's (/bin first): tests expect the commands they name to resolve as here
    inner = " ".join(["env", shlex.quote(f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}"),
                      str(VENV / "bin/python"), str(ROOT / "scripts/kernel_matrix.py"), "--inside", name,
                      "--modules", str(root / "lib/modules" / abi), "--result", str(result),
                      "--tests", ",".join(tests) or "-"])
    env = {**os.environ, "PATH": f"{VENV / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    argv = [str(VENV / "bin/vng"), "--run", str(root / "boot" / f"vmlinuz-{abi}"), "--disable-kvm",
            "--memory", GUEST_MEMORY, "--cpus", str(min(os.cpu_count() or 1, 2)),
            "--rwdir", str(shared), "--overlay-rwdir", "/var/lib", "--cwd", str(ROOT), "--", inner]
    t0 = time.monotonic()
    with open(shared / f"{name}.log", "w") as log:
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  env=env, timeout=GUEST_TIMEOUT_S, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return Row(kernel=name, release=abi, error=f"guest timed out after {GUEST_TIMEOUT_S} s")
    if not result.exists():
        tail = (shared / f"{name}.log").read_text(errors="replace").strip().splitlines()[-3:]
        return Row(kernel=name, release=abi, error=f"guest exited {proc.returncode} with no result: {tail}")
    row = Row(**json.loads(result.read_text()))
    row.seconds = round(time.monotonic() - t0, 1)  # boot included
    return row


def table(rows: list[Row]) -> str:
    """The Markdown table of `rows`."""
    lines = ["| kernel | release | doctor bpf | tracepoints attached | missing: absent-by-kernel "
             "| missing: lost | path source | tests passed | tests failed | start-to-exec | wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s2e = f"{r.start_to_exec_s:.3f} s" if r.start_to_exec_s is not None else "-"
        lines.append(f"| {r.kernel} | {r.release} | {'ok' if r.bpf_ok else 'FAIL'} | {r.attached} "
                     f"| {', '.join(r.absent_by_kernel) or 'none'} | {', '.join(r.lost) or 'none'} "
                     f"| {r.path_source or '-'} | {r.passed} | {r.failed} | {s2e} | {r.seconds:.0f} s |")
    lines += [f"\n{r.kernel}: {r.error}" for r in rows if r.error]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default=",".join(KERNELS),
                        help="comma-separated, from: " + " ".join(KERNELS))
    parser.add_argument("--tests", default="full",
                        help="smoke, full, '-' for none, or comma-separated pytest node ids")
    parser.add_argument("--json", type=Path, help="also write the rows here as JSON")
    parser.add_argument("--inside", help=argparse.SUPPRESS)
    parser.add_argument("--modules", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tests = list(TESTS.get(args.tests, () if args.tests == "-" else args.tests.split(",")))
    if args.inside:
        inside(args.inside, args.modules, tests, args.result)
        return 0
    if os.geteuid() != 0:
        print("kernel-matrix: must run as root (eBPF, guests' kernels)", file=sys.stderr)
        return 2
    names = [n for n in args.kernels.split(",") if n]
    unknown = sorted(set(names) - set(KERNELS))
    if unknown:
        print(f"kernel-matrix: unknown kernel(s) {', '.join(unknown)} (known: {' '.join(KERNELS)})",
              file=sys.stderr)
        return 2
    guests = prepare([n for n in names if n != "host"])
    rows = []
    shared = Path(tempfile.mkdtemp(prefix="kernel-matrix-"))
    for name in names:
        print(f"kernel-matrix: {name} ...", file=sys.stderr, flush=True)
        if name == "host":
            inside(name, None, tests, shared / "host.json")
            row = Row(**json.loads((shared / "host.json").read_text()))
        else:
            row = boot(name, *guests[name], tests, shared)
        rows.append(row)
        print(f"kernel-matrix: {name}: {'ok' if row.ok else 'FAILED'} ({row.seconds:.0f} s)",
              file=sys.stderr, flush=True)
    if all(r.ok for r in rows):
        shutil.rmtree(shared, ignore_errors=True)
    else:
        print(f"kernel-matrix: logs and test reports kept in {shared}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    print(table(rows))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
