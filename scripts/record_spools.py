#!/usr/bin/env python3
"""Record the raw spools in tests/data/ that need policy, SDK or network set-up (needs root).

tests/data/README.md lists every recorded spool and the command it came from;
the pure normalizer tests (tests/test_recorded_spools.py) read them without
root or BPF. Each recording is a real `assay-runner run` in a fixed
workspace under /tmp/rec, so the paths inside are the same on every machine:

- `network.spool`: tests/programs/policy/net_policy.py under a deny-by-default
  network policy: datagram peers (sendto, sendmsg) let through, a UDP send
  and an IPv6 connect refused by the cgroup sock_addr program (NET_BLOCK
  records followed by the EPERM attempts they stand for);
- `sdk.spool`: the dependency-free SDK fixture agent (fixtures/agent/sdk_agent.py)
  under fixtures/agent/policy.toml, as `nobody`: SDK frames, tool decisions,
  a Landlock file block, a sock_addr connect block, and the DAC verdicts a
  non-root run records;
- `dac.spool`: a shell as `nobody` under a policy that writes the workspace
  only: one refused write that ordinary permissions allowed (a policy
  block), one that they refused too (not the policy's doing).

Re-record them when the wire format (`ebpf/assay_events.h`) or the spool
format changes: `sudo .venv/bin/python scripts/record_spools.py [NAME...]`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
BASE = Path("/tmp/rec")
PYTHON = "/usr/bin/python3"
NETWORK_POLICY = """version = 1
name = "recorded-network"
[filesystem]
read = ["/"]
write = ["$WORKSPACE", "/dev/null"]
[network]
default = "deny"
[[network.allow]]
cidr = "127.0.0.1/32"
ports = 5353
protocol = "udp"
[[network.allow]]
cidr = "::1/128"
ports = 11
protocol = "tcp"
"""
DAC_POLICY = """version = 1
name = "recorded-dac"
[filesystem]
read = ["/"]
write = ["$WORKSPACE", "/dev/null"]
"""
DAC_OUTSIDE_ALLOWED = "/tmp/assay-rec-outside.txt"
"""Outside the workspace, in sticky /tmp: nobody may create it, the policy refuses it."""
DAC_OUTSIDE_DENIED = BASE / "denied.txt"
"""Outside the workspace, in root's 0755 /tmp/rec: nobody's permissions refuse it first."""


def _workspace(name: str, world_writable: bool = False) -> Path:
    work = BASE / name / "work"
    shutil.rmtree(work.parent, ignore_errors=True)
    work.mkdir(parents=True)
    if world_writable:  # the command runs as nobody and writes here
        work.chmod(0o777)
    return work


def _run(name: str, workdir: Path, *args: str | Path) -> Path:
    out = BASE / "out"
    cmd = [sys.executable, "-m", "runner.cli.main", "run", "--out", out, "--run-id", name,
           "--force", "--workdir", workdir, *args]
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL)
    return out / f"{name}.spool"


def network() -> Path:
    work = _workspace("network")
    policy = BASE / "network.toml"
    policy.write_text(NETWORK_POLICY)
    shutil.copy(ROOT / "tests" / "programs" / "policy" / "net_policy.py", work.parent / "net_policy.py")
    return _run("network", work, "--policy", policy, "--", PYTHON, "-B", "-S", "../net_policy.py")


def sdk() -> Path:
    work = _workspace("sdk", world_writable=True)
    shutil.rmtree(work)
    shutil.copytree(ROOT / "fixtures" / "agent" / "workspace", work, ignore=shutil.ignore_patterns("notes"))
    work.chmod(0o777)
    for name in ("sdk_agent.py", "fixture_tools.py"):
        shutil.copy(ROOT / "fixtures" / "agent" / name, work.parent / name)
    shutil.copytree(ROOT / "assay_sdk", work.parent / "assay_sdk",
                    ignore=shutil.ignore_patterns("__pycache__"))
    Path("/tmp/assay-fixture-outside.txt").unlink(missing_ok=True)
    return _run("sdk", work, "--user", "nobody", "--policy", ROOT / "fixtures" / "agent" / "policy.toml",
                "--", PYTHON, "-B", "-S", "../sdk_agent.py")


def dac() -> Path:
    work = _workspace("dac", world_writable=True)
    policy = BASE / "dac.toml"
    policy.write_text(DAC_POLICY)
    Path(DAC_OUTSIDE_ALLOWED).unlink(missing_ok=True)
    script = (f"echo in > inside.txt; echo out > {DAC_OUTSIDE_ALLOWED}; echo out > {DAC_OUTSIDE_DENIED}; "
              "cat /etc/hostname > /dev/null; exit 0")
    return _run("dac", work, "--user", "nobody", "--policy", policy, "--", "sh", "-c", script)


RECORDINGS: dict[str, Callable[[], Path]] = {"network": network, "sdk": sdk, "dac": dac}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[[], *RECORDINGS], default=[],
                        help="which spools to record (default: all)")
    args = parser.parse_args()
    BASE.mkdir(mode=0o755, exist_ok=True)
    BASE.chmod(0o755)  # nobody reads the workspaces below it, and cannot write it
    for name in args.names or list(RECORDINGS):
        spool = RECORDINGS[name]()
        shutil.copyfile(spool, DATA / f"{name}.spool")
        print(f"{DATA / f'{name}.spool'}: {spool.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
