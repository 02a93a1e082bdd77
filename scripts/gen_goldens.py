#!/usr/bin/env python3
"""Regenerate the run-based goldens (`golden/archive-*/`) from real runs (needs root).

Each archive comes from `assay-runner run` of a fixed command in a fixed
workspace under /tmp/assay-runner, so paths, pids and order are the same on
every machine, and its members are written out as files:

- `archive-minimal/`: `sh -c 'cat input.txt > output.txt'`, no policy, no SDK;
- `archive-sdk-policy/`: the dependency-free SDK fixture agent
  (fixtures/agent/sdk_agent.py, copied next to its workspace with the SDK
  client) under fixtures/agent/policy.toml: tool decisions, a Landlock file
  block and a sock_addr connect block inside tool calls.

Usage: sudo .venv/bin/python scripts/gen_goldens.py [--check]
`--check` compares instead of writing and exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.evidence.archive import read_archive  # noqa: E402

BASE = Path("/tmp/assay-runner")
PYTHON = "/usr/bin/python3"


def _run(out: Path, run_id: str, workdir: Path, *args: str) -> dict[str, bytes]:
    cmd = [sys.executable, "-m", "runner.cli.main", "run", "--out", str(out), "--run-id", run_id,
           "--force", "--workdir", str(workdir), *args]
    # A fixed environment: the command inherits the runner's, and a caller's
    # PYTHONPATH or locale would show up in the agent's opens.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=env)
    return read_archive(out / f"{run_id}.tar.gz")


def minimal(out: Path) -> dict[str, bytes]:
    work = BASE / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "input.txt").write_text("hello\n")
    return _run(out, "run_minimal", work, "--", "sh", "-c", "cat input.txt > output.txt")


def sdk_policy(out: Path) -> dict[str, bytes]:
    agent = BASE / "agent"
    shutil.rmtree(agent, ignore_errors=True)
    shutil.copytree(ROOT / "fixtures" / "agent" / "workspace", agent / "workspace")
    shutil.rmtree(agent / "workspace" / "notes", ignore_errors=True)
    for name in ("sdk_agent.py", "fixture_tools.py"):
        shutil.copy(ROOT / "fixtures" / "agent" / name, agent / name)
    shutil.copytree(ROOT / "assay_sdk", agent / "assay_sdk", ignore=shutil.ignore_patterns("__pycache__"))
    return _run(out, "run_sdk_policy", agent / "workspace", "--policy",
                str(ROOT / "fixtures" / "agent" / "policy.toml"), "--", PYTHON, "-B", "-S", "../sdk_agent.py")


GOLDENS = {"archive-minimal": minimal, "archive-sdk-policy": sdk_policy}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with golden/ instead of writing")
    args = ap.parse_args()
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in GOLDENS.items():
            members = make(Path(tmp))
            target = ROOT / "golden" / name
            for member, data in sorted(members.items()):
                path = target / member
                if args.check:
                    if not path.is_file() or path.read_bytes() != data:
                        print(f"{path}: differs from a fresh run", file=sys.stderr)
                        old = path.read_bytes().splitlines() if path.is_file() else []
                        sys.stderr.writelines(difflib.unified_diff(
                            [line.decode(errors="replace") + "\n" for line in old],
                            [line.decode(errors="replace") + "\n" for line in data.splitlines()],
                            "golden", "fresh run", n=0))
                        differ = 1
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                print(f"wrote {path}")
    return differ


if __name__ == "__main__":
    raise SystemExit(main())
