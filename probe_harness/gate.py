"""`probe-contract-gate`: refuse a probe that breaks the authoring contract.

Static checks read the script: it lives directly in the probes directory as
`<id>.sh` and is executable; line 1 is exactly `#!/usr/bin/env bash`; the
first command is `set -euo pipefail`; `bash -n` passes; the literal
`probe_name` equals the file name; the literal `primary_capability_id`
exists in the catalog.

The dynamic check runs a copy of the probe in baseline from a shadow tree,
as upstream's gate does: `SHADOW/probes/<id>.sh`, with `SHADOW/bin/` holding
a stub `emit-record` beside links to the harness's other `bin/` helpers, and
`SHADOW/bin` first on PATH. So a probe that calls `emit-record` from PATH and
one that calls `${repo_root}/bin/emit-record` (fencerunner's probes) both
reach the stub. The stub parses its flags with the real emit-record
(required flags, enums, capability ids, the full record validated against
the schema), records each call in a state file and prints a random token.
The probe passes only if it exits 0, called the stub exactly once with no
problem, and printed nothing but the token. The reference gate's stub counted
calls and grepped flags; this one shares emit-record's code, so it cannot
drift from it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from probe_harness import PROBES_DIR, ROOT
from probe_harness.contracts import ContractError, Contracts, load_contracts
from probe_harness.emit import EmitError, emit
from probe_harness.modes import BASELINE, Settings, probe_env
from probe_harness.probefile import declared
from probe_harness.stack import StackError

SHEBANG = "#!/usr/bin/env bash"
STRICT = "set -euo pipefail"
STATE_ENV = "FENCE_GATE_STATE"
TOKEN_ENV = "FENCE_GATE_TOKEN"
GATE_TIMEOUT_S = 30.0
HELPERS_DIR = ROOT / "bin"
"""The helpers fencerunner's probes call as `${repo_root}/bin/NAME`."""


def static_problems(path: Path, probes_dir: Path, contracts: Contracts) -> list[str]:
    """Contract violations visible without running the script."""
    if path.resolve().parent != probes_dir.resolve() or path.suffix != ".sh":
        return [f"not a probe location: probes live directly in {probes_dir} as <probe_id>.sh"]
    if not path.is_file():
        return ["no such file"]
    out = []
    if not os.access(path, os.X_OK):
        out.append("not executable (chmod +x)")
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    if not lines or lines[0] != SHEBANG:
        out.append(f"line 1 must be exactly {SHEBANG!r}")
    commands = [ln.strip() for ln in lines[1:] if ln.strip() and not ln.strip().startswith("#")]
    if not commands or commands[0] != STRICT:
        out.append(f"the first command must be {STRICT!r}")
    syntax = subprocess.run(
        ["bash", "-n", str(path)], capture_output=True, text=True, errors="replace", check=False
    )
    if syntax.returncode != 0:
        out.append(f"bash -n: {(syntax.stderr.strip().splitlines() or ['syntax error'])[0]}")
    name = declared(text, "probe_name")
    if name is None:
        out.append('no literal probe_name="..." assignment')
    elif name != path.stem:
        out.append(f"probe_name {name!r} does not match the file name {path.stem!r}")
    cap = declared(text, "primary_capability_id")
    if cap is None:
        out.append('no literal primary_capability_id="..." assignment')
    elif cap not in contracts.catalog.capabilities:
        out.append(f"primary_capability_id {cap!r} is not in catalog {contracts.catalog.key}")
    return out


def _write_stub(directory: Path) -> None:
    stub = directory / "emit-record"
    stub.write_text(
        f"#!{sys.executable}\nimport sys\nfrom probe_harness.gate import stub_main\nsys.exit(stub_main())\n",
        encoding="utf-8",
    )
    stub.chmod(0o755)


def _shadow_tree(root: Path, path: Path) -> Path:
    """SHADOW/probes/<id>.sh, SHADOW/bin (the stub, links to the other helpers) and SHADOW/tmp (which
    upstream's probes use as `${repo_root}/tmp`, as its gate provides); the probe's copy."""
    for sub in ("bin", "probes", "tmp", "ws"):
        (root / sub).mkdir()
    for helper in sorted(HELPERS_DIR.iterdir()) if HELPERS_DIR.is_dir() else []:
        if helper.name != "emit-record":
            (root / "bin" / helper.name).symlink_to(helper.resolve())
    _write_stub(root / "bin")
    copy = root / "probes" / path.name
    shutil.copyfile(path, copy)
    copy.chmod(0o755)
    return copy


def dynamic_problems(path: Path, contracts: Contracts) -> list[str]:
    """Run the probe in baseline against the stub; every way it broke the contract."""
    with tempfile.TemporaryDirectory(prefix="probe-gate-") as tmp:
        root = Path(tmp)
        shadow = _shadow_tree(root, path)
        settings = Settings(root / "ws", contracts.catalog.path, contracts.boundary.path, root)
        settings.tmpdir.mkdir()
        token = json.dumps({"gate_stub": secrets.token_hex(8)})
        state = root / "calls.ndjson"
        env = probe_env(BASELINE, settings)
        env.update(
            {"PATH": f"{root / 'bin'}{os.pathsep}{env['PATH']}", STATE_ENV: str(state), TOKEN_ENV: token}
        )
        try:
            done = subprocess.run(
                [str(shadow)],
                env=env,
                cwd=settings.workspace,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=GATE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return [f"did not finish within {GATE_TIMEOUT_S:.0f} s"]
        calls = [json.loads(x) for x in state.read_text().splitlines()] if state.exists() else []
    out = []
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        out.append(f"exited {done.returncode} (must exit 0 after emitting): {tail[:200]}")
    if not calls:
        out.append("never called emit-record (call it from PATH exactly once)")
    elif len(calls) > 1:
        out.append(f"called emit-record {len(calls)} times, expected exactly once")
    for call in calls:
        out.extend(f"emit-record: {p}" for p in call["problems"])
    printed = done.stdout.replace(token, "", 1) if calls else done.stdout
    if printed.strip("\n"):
        out.append(f"printed to stdout besides the record: {printed.strip()[:120]!r}")
    return out


def stub_main() -> int:
    """The stub emit-record: validate like the real one, log the call, print the token."""
    try:
        emit(sys.argv[1:], os.environ)
        problems: list[str] = []
    except (EmitError, ContractError, StackError) as exc:
        problems = [str(exc)]
    with open(os.environ[STATE_ENV], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"argv": sys.argv[1:], "problems": problems}) + "\n")
    print(os.environ[TOKEN_ENV])
    return 0


def gate(path: Path, probes_dir: Path, contracts: Contracts, static_only: bool = False) -> list[str]:
    """Every problem of one probe: static first; the dynamic check only runs a statically sound probe."""
    problems = static_problems(path, probes_dir, contracts)
    if not problems and not static_only:
        problems = dynamic_problems(path, contracts)
    return problems


def main() -> int:
    """Console script: `probe-contract-gate [--static-only] [PROBE...]` (default: every probe)."""
    p = argparse.ArgumentParser(prog="probe-contract-gate", description=__doc__.splitlines()[0])
    p.add_argument("probes", nargs="*", type=Path, help="probe scripts (default: every probes/*.sh)")
    p.add_argument("--static-only", action="store_true", help="skip running the probe")
    p.add_argument("--probes-dir", type=Path, default=PROBES_DIR, help="where probes must live")
    p.add_argument("--catalog")
    p.add_argument("--boundary")
    args = p.parse_args()
    try:
        contracts = load_contracts(args.catalog, args.boundary)
    except ContractError as exc:
        print(f"probe-contract-gate: error: {exc}", file=sys.stderr)
        return 2
    probes = args.probes or sorted(args.probes_dir.glob("*.sh"))
    failed = 0
    for path in probes:
        problems = gate(path, args.probes_dir, contracts, args.static_only)
        for problem in problems:
            print(f"probe-contract-gate: {path}: {problem}", file=sys.stderr)
        if problems:
            failed += 1
        else:
            print(f"probe-contract-gate: PASS {path}", file=sys.stderr)
    return 1 if failed else 0
