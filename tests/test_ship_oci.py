"""push and pull against a real registry (Debian's docker-registry, tests/registry_support.py).

No root: the archive is normalized from a recorded spool. Credentials come
only from a docker config (DOCKER_CONFIG), inline `auths` or a credential
helper, as they do for docker and oras.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry_support import Registry
from tests.support import ROOT

CLI = ROOT / ".venv" / "bin" / "assay-runner"
DATA = ROOT / "tests" / "data"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def cli(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *map(str, args)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("archive") / "example.tar.gz"
    done = cli("normalize", "--out", out, DATA / "example.spool")
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    reg = Registry(tmp_path / "registry", "alice", "s3cret-pass").start()
    yield reg
    reg.stop()


def _env(registry: Registry, tmp: Path) -> dict[str, str]:
    return {**os.environ, "DOCKER_CONFIG": str(registry.docker_config(tmp / "docker"))}


def _manifest(registry: Registry, ref: str) -> dict | None:
    token = base64.b64encode(f"{registry.user}:{registry.password}".encode()).decode()
    request = urllib.request.Request(f"http://{registry.host}/v2/{ref}", headers={
        "Accept": MANIFEST, "Authorization": f"Basic {token}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def test_push_then_pull_is_byte_identical_and_validates(registry: Registry, archive: Path,
                                                        tmp_path: Path) -> None:  # fmt: skip
    env, ref = _env(registry, tmp_path), f"{registry.host}/team/evidence:example"
    pushed = cli("push", archive, ref, env=env)
    assert pushed.returncode == 0, pushed.stderr
    digest = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    assert digest in pushed.stdout
    manifest = _manifest(registry, "team/evidence/manifests/example")
    assert manifest is not None
    assert manifest["artifactType"] == "application/vnd.assay.runner.archive.v0"
    assert [layer["digest"] for layer in manifest["layers"]] == [digest]
    notes = manifest["annotations"]
    assert notes["dev.assay.runner.run_id"] == "example"
    assert notes["dev.assay.runner.health"] == "passing"
    assert notes["org.opencontainers.image.title"] == "example.tar.gz"
    out = tmp_path / "pulled"
    out.mkdir()
    pulled = cli("pull", ref, out, env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert (out / "example.tar.gz").read_bytes() == archive.read_bytes()
    assert sorted(p.name for p in out.iterdir()) == ["example.tar.gz"]
    assert cli("validate", out / "example.tar.gz").returncode == 0


@pytest.mark.parametrize("damage", ["truncated", "not_an_archive"])
def test_push_refuses_a_damaged_archive(registry: Registry, archive: Path, tmp_path: Path,
                                        damage: str) -> None:  # fmt: skip
    bad = tmp_path / "bad.tar.gz"
    data = archive.read_bytes()
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not gzip at all")
    done = cli("push", bad, f"{registry.host}/team/evidence:bad", env=_env(registry, tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "nothing was pushed" in done.stderr
    assert _manifest(registry, "team/evidence/manifests/bad") is None


def test_pull_refuses_bytes_that_do_not_match_the_digest(registry: Registry, archive: Path,
                                                         tmp_path: Path) -> None:  # fmt: skip
    env, ref = _env(registry, tmp_path), f"{registry.host}/team/evidence:example"
    assert cli("push", archive, ref, env=env).returncode == 0
    blob = registry.blob_path("sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest())
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed: only the digest can tell
    blob.write_bytes(bytes(data))
    out = tmp_path / "pulled"
    out.mkdir()
    done = cli("pull", ref, out, env=env)
    assert done.returncode == 2, done.stderr
    assert "nothing was written" in done.stderr and done.stderr.count("\n") == 1
    assert list(out.iterdir()) == []


def test_credentials_come_from_a_credential_helper(registry: Registry, archive: Path, tmp_path: Path) -> None:
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    helper = helpers / "docker-credential-assaytest"
    secret = json.dumps({"Username": registry.user, "Secret": registry.password})
    helper.write_text(f"#!/bin/sh\n[ \"$1\" = get ] || exit 1\ncat >/dev/null\necho '{secret}'\n")
    helper.chmod(0o755)
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"credHelpers": {registry.host: "assaytest"}}))
    env = {**os.environ, "DOCKER_CONFIG": str(config), "PATH": f"{helpers}:{os.environ['PATH']}"}
    done = cli("push", archive, f"{registry.host}/team/evidence:helper", env=env)
    assert done.returncode == 0, done.stderr
    assert _manifest(registry, "team/evidence/manifests/helper") is not None


def test_missing_or_wrong_credentials_are_one_line(registry: Registry, archive: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    none = cli("push", archive, f"{registry.host}/a/b:c", env={**os.environ, "DOCKER_CONFIG": str(empty)})
    assert none.returncode == 125 and "docker login" in none.stderr and none.stderr.count("\n") == 1
    wrong = Registry(registry.root, registry.user, "not-the-password", port=registry.port)
    env = {**os.environ, "DOCKER_CONFIG": str(wrong.docker_config(tmp_path / "wrong"))}
    refused = cli("push", archive, f"{registry.host}/a/b:c", env=env)
    assert refused.returncode == 125 and "refused" in refused.stderr and refused.stderr.count("\n") == 1


def test_a_registry_that_is_down_and_a_bad_reference(archive: Path, tmp_path: Path) -> None:
    down = Registry(tmp_path / "down")  # never started: its port is free
    done = cli("push", archive, f"{down.host}/team/evidence:x")
    assert done.returncode == 125 and "unreachable" in done.stderr and done.stderr.count("\n") == 1
    for bad in ("evidence:x", "localhost:5000/UPPER/case:x", "localhost:5000/a:b:c"):
        refused = cli("push", archive, bad)
        assert refused.returncode == 2 and "not an artifact reference" in refused.stderr, bad
