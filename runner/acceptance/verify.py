"""`acceptance verify PACK`: re-check a proof pack offline, trusting nothing in it.

Every subject's size and digest are recomputed; `subject-checksums.txt` must
list exactly the manifest (with its real digest) and the subjects; a file in
the pack that no subject lists is a problem; every runner archive is
validated again (contract and conformance rules, `validate_path`); the
archives of a gate marked passed must still be byte-identical (for the
probe-matrix gate, its own rule holds again over the pack's records and
archives: probe_gate.judge). With
`require`, each required gate must be in the pack and passed: a gate that
was skipped or could not run fails verification. Each problem names the
subject or gate it is about.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath

import msgspec

from runner.acceptance import probe_gate
from runner.acceptance.execute import EXPECTATIONS, RUNS
from runner.acceptance.expect import ExpectationError, load
from runner.acceptance.gates import BY_NAME, Gate
from runner.acceptance.pack import CHECKSUMS, MANIFEST, PACK_SCHEMA, PackManifest, sha256_file
from runner.evidence.validate import archive_problems

_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")
WORK = ".work"


class PackError(ValueError):
    """The pack cannot be verified at all (no readable manifest)."""


def load_manifest(pack: Path) -> tuple[PackManifest, bytes]:
    try:
        data = (pack / MANIFEST).read_bytes()
    except OSError as exc:
        raise PackError(f"{pack}: no readable {MANIFEST} ({exc.strerror or exc}): not a proof pack") from exc
    try:
        manifest = msgspec.json.decode(data, type=PackManifest)
    except (msgspec.MsgspecError, UnicodeDecodeError) as exc:
        raise PackError(f"{pack / MANIFEST}: {exc}") from exc
    if manifest.schema != PACK_SCHEMA:
        raise PackError(f"{pack / MANIFEST}: schema {manifest.schema!r}, expected {PACK_SCHEMA!r}")
    return manifest, data


def _safe(path: str) -> bool:
    p = PurePosixPath(path)
    return bool(p.parts) and not p.is_absolute() and ".." not in p.parts


def _checksum_problems(pack: Path, manifest: PackManifest, manifest_bytes: bytes) -> list[str]:
    try:
        text = (pack / CHECKSUMS).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{CHECKSUMS}: unreadable ({exc})"]
    want = {MANIFEST: hashlib.sha256(manifest_bytes).hexdigest()}
    want |= {s.path: s.sha256.removeprefix("sha256:") for s in manifest.subjects}
    got: dict[str, str] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = _LINE.match(line)
        if not m:
            problems.append(f"{CHECKSUMS}:{number}: not '<sha256 hex>  <path>'")
            continue
        got[m.group(2)] = m.group(1)
    for path in sorted(want.keys() | got.keys()):
        if path not in got:
            problems.append(f"{CHECKSUMS}: {path} is missing")
        elif path not in want:
            problems.append(f"{CHECKSUMS}: {path} is not a subject of {MANIFEST}")
        elif got[path] != want[path]:
            what = "the manifest's real digest" if path == MANIFEST else "the digest in the manifest"
            problems.append(f"{CHECKSUMS}: {path} has {got[path][:16]}…, not {what} {want[path][:16]}…")
    return problems


def _subject_problems(pack: Path, manifest: PackManifest) -> list[str]:
    problems = []
    for s in manifest.subjects:
        if not _safe(s.path):
            problems.append(f"subject {s.path}: unsafe path")
            continue
        file = pack / s.path
        if not file.is_file() or file.is_symlink():
            problems.append(f"subject {s.path}: missing from the pack")
            continue
        size, digest = file.stat().st_size, sha256_file(file)
        if size != s.bytes:
            problems.append(f"subject {s.path}: {size} bytes, the manifest says {s.bytes}")
        if digest != s.sha256:
            problems.append(f"subject {s.path}: sha256 mismatch (file {digest}, manifest {s.sha256})")
        if s.role == "runner_archive":
            problems += [f"subject {s.path}: {p}" for p in archive_problems(file)]
    listed = {s.path for s in manifest.subjects} | {MANIFEST, CHECKSUMS}
    for file in sorted(pack.rglob("*")):
        rel = file.relative_to(pack).as_posix()
        if file.is_file() and rel not in listed and not rel.startswith(WORK + "/"):
            problems.append(f"file {rel}: in the pack but not a subject of {MANIFEST}")
    return problems


def _probe_gate_problems(pack: Path, gate: str) -> list[str]:
    """The probe-matrix rule applied again to the pack's own files (probe_gate.judge)."""
    gate_dir = pack / "gates" / gate
    try:
        exp = load(gate_dir / EXPECTATIONS).probe_matrix
    except ExpectationError as exc:
        return [f"gate {gate}: {exc}"]
    if exp is None:
        return [f"gate {gate}: its {EXPECTATIONS} has no [probe_matrix] table"]
    _, problems = probe_gate.judge(gate_dir, RUNS, exp)
    return [f"gate {gate}: marked passed, but {p}" for p in problems]


def _gate_problems(pack: Path, manifest: PackManifest, require: list[Gate]) -> list[str]:
    digests = {s.path: s.sha256 for s in manifest.subjects}
    by_gate = {g.gate: g for g in manifest.gates}
    problems = []
    for g in manifest.gates:
        known = BY_NAME.get(g.gate)
        if g.status == "passed" and known is not None and known.probe_matrix:
            problems += _probe_gate_problems(pack, g.gate)
        elif g.status == "passed" and len({digests.get(a) for a in g.archives}) != 1:
            problems.append(f"gate {g.gate}: marked passed, but its archives are not byte-identical")
        if g.status == "passed" and not g.archives:
            problems.append(f"gate {g.gate}: marked passed, but it has no archives")
    for gate in require:
        entry = by_gate.get(gate.name)
        if entry is None:
            problems.append(f"gate {gate.name}: required, but not in the pack (skipped)")
        elif entry.status != "passed":
            status = entry.status.replace("_", " ")
            problems.append(f"gate {gate.name}: required, but {status}: {entry.reason}")
    return problems


def verify(pack: Path, require: list[Gate]) -> tuple[PackManifest, list[str]]:
    """The manifest and every problem found (empty: the pack verifies)."""
    manifest, data = load_manifest(pack)
    problems = _checksum_problems(pack, manifest, data)
    problems += _subject_problems(pack, manifest)
    problems += _gate_problems(pack, manifest, require)
    return manifest, problems
