"""The proof pack: what the gates did, with a digest for every file, ready to attest.

`OUT/manifest.json` (schema `assay.runner.acceptance_proof_pack.v0`) lists
every gate's status, reason and log, every file the gates left (its path,
bytes, `sha256:` digest and role), the runner's version with the git commit
and tree ids of the gated paths, the kernel and BCC versions, and the claim
ceiling: what the pack does not prove. `OUT/subject-checksums.txt` holds
the same digests, manifest first, as `sha256sum` writes them
(`<hex>  <path>`): the format `actions/attest-build-provenance` takes as
`subject-checksums`, and `sha256sum -c` checks from inside OUT.

The manifest is rewritten from the gate directories after every gate, so a
CI job that runs one gate per step always leaves a complete pack.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from runner import __version__
from runner.acceptance.execute import LOG, RESULT, GateResult
from runner.acceptance.gates import BY_NAME, GATED_PATHS, REPO
from runner.evidence.archive import write_atomic

PACK_SCHEMA = "assay.runner.acceptance_proof_pack.v0"
MANIFEST = "manifest.json"
CHECKSUMS = "subject-checksums.txt"
ROLES = {
    ".tar.gz": "runner_archive",
    ".spool": "raw_spool",
    LOG: "gate_log",
    RESULT: "gate_result",
    "determinism-report.json": "determinism_report",
    "expectations.toml": "gate_expectations",
    "report.html": "run_report",
    "events.jsonl": "decision_events",
    "records.ndjson": "probe_records",
    "probe.log": "probe_log",
    "corroboration.json": "corroboration_report",
    "outcomes.json": "probe_outcomes",
}
CLAIM_CEILING = "gate_execution_on_this_host_only"
NOT_PROVEN = [
    "that the observed agent or any other command is safe, or that its behaviour is benign",
    "that capture is complete on other kernels, hosts or configurations than the one recorded here",
    "that the fixtures represent real agent workloads: they are small scripted commands",
    "that evidence outside the kernel layer is true: the SDK layer is self-reported by the agent",
    "anything about the checkout beyond the recorded tree ids (a dirty tree is flagged, not captured)",
    "who ran the gates: that is the job of the attestation over subject-checksums.txt, not of this file",
    "for the probe matrix: outbound TCP to a real peer (none is configured, the probe records error), "
    "or any sandbox other than the runner's three presets",
]


class Subject(msgspec.Struct):
    path: str
    bytes: int
    sha256: str
    role: str


class GateEntry(msgspec.Struct):
    gate: str
    status: str
    reason: str
    problems: list[str]
    log: str
    archives: list[str]


class PathTree(msgspec.Struct):
    path: str
    tree: str | None
    """`git rev-parse HEAD:PATH` (a tree or blob id), None outside a git checkout."""
    modified: bool
    """The working tree differs from HEAD under this path: the id does not describe what ran."""


class Runner(msgspec.Struct):
    version: str
    git_commit: str | None
    gated_paths: list[PathTree]


class Host(msgspec.Struct):
    kernel: str
    machine: str
    bcc: str | None


class ClaimCeiling(msgspec.Struct):
    claim: str
    proves: str
    does_not_prove: list[str]


class PackManifest(msgspec.Struct):
    schema: str
    created_at: str
    runner: Runner
    host: Host
    gates: list[GateEntry]
    subjects: list[Subject]
    claim_ceiling: ClaimCeiling


def sha256_file(path: Path) -> str:
    """`sha256:<hex>` of a file, read in chunks (spools can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def role_of(name: str) -> str:
    for suffix, role in ROLES.items():
        if name.endswith(suffix):
            return role
    return "gate_file"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def runner_identity() -> Runner:
    """The version, commit and gated-path tree ids of the checkout that ran the gates."""
    commit = _git("rev-parse", "HEAD")
    trees = []
    for path in GATED_PATHS:
        tree = _git("rev-parse", f"HEAD:{path}") if commit else None
        status = _git("status", "--porcelain", "--", path) if commit else None
        trees.append(PathTree(path, tree, bool(status)))
    return Runner(__version__, commit, trees)


def host_identity() -> Host:
    try:
        bcc: str | None = importlib.metadata.version("bcc")
    except importlib.metadata.PackageNotFoundError:
        bcc = None
    return Host(platform.release(), platform.machine(), bcc)


def _gate_entries(out: Path) -> list[GateEntry]:
    entries = []
    for result_file in sorted((out / "gates").glob(f"*/{RESULT}")):
        result = msgspec.json.decode(result_file.read_bytes(), type=GateResult)
        gate_dir = result_file.parent
        archives = sorted(p.relative_to(out).as_posix() for p in gate_dir.glob("run-*/*.tar.gz"))
        entries.append(GateEntry(result.gate, result.status, result.reason, result.problems,
                                 (gate_dir / LOG).relative_to(out).as_posix(), archives))
    order = list(BY_NAME)
    return sorted(entries, key=lambda e: (order.index(e.gate) if e.gate in order else len(order), e.gate))


def subjects_of(out: Path) -> list[Subject]:
    """Every file under OUT/gates, sorted by path."""
    files = sorted(p for p in (out / "gates").rglob("*") if p.is_file() and not p.is_symlink())
    return [Subject(p.relative_to(out).as_posix(), p.stat().st_size, sha256_file(p), role_of(p.name))
            for p in files]


def checksum_lines(manifest_digest: str, subjects: list[Subject]) -> str:
    """`subject-checksums.txt`: the manifest, then every subject, as `sha256sum` prints them."""
    entries = [(manifest_digest, MANIFEST)] + [(s.sha256, s.path) for s in subjects]
    return "".join(f"{digest.removeprefix('sha256:')}  {path}\n" for digest, path in entries)


def write_pack(out: Path) -> PackManifest:
    """(Re)write OUT/manifest.json and OUT/subject-checksums.txt from the gate directories."""
    subjects = subjects_of(out)
    manifest = PackManifest(
        schema=PACK_SCHEMA,
        created_at=datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        runner=runner_identity(),
        host=host_identity(),
        gates=_gate_entries(out),
        subjects=subjects,
        claim_ceiling=ClaimCeiling(
            claim=CLAIM_CEILING,
            proves=("On the recorded host and checkout, each gate marked passed ran its command three "
                    "times, got byte-identical archives with passing health, every archive validated, "
                    "and the evidence matched the gate's expectations file."),
            does_not_prove=NOT_PROVEN,
        ),
    )
    data = msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n"
    write_atomic(out / MANIFEST, data)
    write_atomic(out / CHECKSUMS, checksum_lines(
        "sha256:" + hashlib.sha256(data).hexdigest(), subjects).encode())
    return manifest
