"""Archives as OCI artifacts: `push` one to a registry, `pull` it back with its digest checked.

The artifact is what ORAS and the OCI 1.1 image spec call an artifact
manifest: `artifactType` application/vnd.assay.runner.archive.v0, the empty
config (`application/vnd.oci.empty.v1+json`), and the archive as its one
layer, so the layer digest is the archive's own sha256 and anyone can check a
pulled file against the manifest. The transport is the `oras` library (blob
and manifest uploads, the registry's auth challenge, the docker config's
`auths`, `credHelpers` and `credsStore`); credentials never come from a flag.

A registry on localhost or 127.0.0.1 is spoken to over plain HTTP, as docker
and oras do; every other registry over HTTPS unless `plain_http` is set.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from runner import __version__
from runner.errors import EXIT_BAD_INPUT, RunnerError

ARTIFACT_TYPE = "application/vnd.assay.runner.archive.v0"
LAYER_MEDIA_TYPE = "application/vnd.assay.runner.archive.v0.tar+gzip"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
EMPTY_CONFIG = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    "size": 2,
}
"""The OCI empty descriptor: the two bytes `{}`."""
TITLE = "org.opencontainers.image.title"
ANNOTATION_PREFIX = "dev.assay.runner."
HEALTH_MEMBER = "observation-health.json"
HEALTH_MAX = 1 << 20
CHUNK = 1 << 20
_NAME = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"(?P<registry>[A-Za-z0-9.-]+(?::[0-9]+)?)/(?P<repository>{_NAME}(?:/{_NAME})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})|@(?P<digest>sha256:[0-9a-f]{64}))?"
)
"""registry/repository[:tag|@digest], the distribution spec's grammar (a registry host is required)."""
SAFE_TITLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,200}\.tar\.gz")


class ShipError(RunnerError):
    """A push or pull that cannot be done; the message says what to do."""


@dataclass(frozen=True)
class Reference:
    """A parsed artifact reference."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> Reference:
        match = REFERENCE.fullmatch(text)
        if match is None:
            raise ShipError(
                f"{text!r} is not an artifact reference: use REGISTRY/REPOSITORY[:TAG], "
                "for example localhost:5000/team/evidence:RUN_ID",
                EXIT_BAD_INPUT,
            )
        return cls(match["registry"], match["repository"], match["tag"], match["digest"])

    @property
    def target(self) -> str:
        """The reference as oras parses it (tag `latest` when none is given)."""
        suffix = f"@{self.digest}" if self.digest else f":{self.tag or 'latest'}"
        return f"{self.registry}/{self.repository}{suffix}"

    def plain_http(self) -> bool:
        """Docker's rule: loopback registries need no TLS."""
        host = self.registry.rsplit(":", 1)[0] if not self.registry.startswith("[") else self.registry
        return host in ("localhost", "127.0.0.1", "[::1]")


def docker_config() -> Path | None:
    """`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, when it exists."""
    base = os.environ.get("DOCKER_CONFIG")
    path = Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"
    return path if path.is_file() else None


def file_digest(path: Path) -> tuple[str, int]:
    """`sha256:<hex>` and size of a file, read in chunks."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
            size += len(block)
    return f"sha256:{digest.hexdigest()}", size


def health_verdict(archive: Path) -> str:
    """`passing` or `failing:<field=value,...>` from the archive's observation-health member."""
    from runner.evidence.compare import check_health  # the one definition of passing health

    with tarfile.open(archive, "r:gz") as tar:
        info = tar.getmember(HEALTH_MEMBER)
        if not info.isfile() or info.size > HEALTH_MAX:
            raise ShipError(f"{archive}: {HEALTH_MEMBER} is not a small regular member", EXIT_BAD_INPUT)
        handle = tar.extractfile(info)
        _, failures = check_health(0, {HEALTH_MEMBER: handle.read() if handle else b""})
    return "passing" if not failures else "failing:" + ",".join(f"{f.field}={f.value}" for f in failures)


def listing_annotations(archive: Path, run_id: str) -> dict[str, str]:
    """What a registry listing shows without pulling: run, health, who pushed from which kernel."""
    return {
        TITLE: f"{run_id}.tar.gz",
        "org.opencontainers.image.version": __version__,
        "org.opencontainers.image.vendor": "assay-runner",
        f"{ANNOTATION_PREFIX}run_id": run_id,
        f"{ANNOTATION_PREFIX}health": health_verdict(archive),
        f"{ANNOTATION_PREFIX}pushed_from_kernel": platform.release(),
        f"{ANNOTATION_PREFIX}runner_version": __version__,
    }


def _auth_scheme(ref: Reference, insecure: bool) -> str:
    """oras's auth backend for this registry: the distribution spec's version check (`GET /v2/`)
    says whether it wants Basic credentials or a Bearer token."""
    import requests

    scheme = "http" if insecure else "https"
    with _transport_errors("reach", ref):
        answer = requests.get(f"{scheme}://{ref.registry}/v2/", timeout=30)
    challenge = answer.headers.get("Www-Authenticate", "")
    return "basic" if challenge.lower().startswith("basic") else "token"


def _oras_message(message: dict[str, Any]) -> None:
    """oras prints its warnings on stderr itself; here they are runner log lines, so a failure
    stays the one line the command prints."""
    structlog.get_logger("oras").info("oras", level=message.get("level"), msg=str(message.get("msg")))


def _registry(ref: Reference, plain_http: bool | None) -> Any:
    import oras.logger  # the transport; imported only by push and pull
    import oras.provider

    oras.logger.logger.handler = _oras_message

    insecure = ref.plain_http() if plain_http is None else plain_http
    registry = oras.provider.Registry(
        hostname=ref.registry, insecure=insecure, auth_backend=_auth_scheme(ref, insecure)
    )
    container = registry.get_container(ref.target)
    config = docker_config()
    registry.auth.load_configs(container, configs=[str(config)] if config else None)
    if registry.auth.__class__.__name__ == "BasicAuth" and not registry.auth._load_auth(ref.registry):
        raise ShipError(
            f"{ref.registry} asks for credentials and the docker config "
            f"({config or '~/.docker/config.json'}) has none for it: run 'docker login {ref.registry}' "
            "(or add a credHelper)"
        )
    return registry, container


@contextmanager
def _transport_errors(action: str, ref: Reference) -> Iterator[None]:
    import requests

    try:
        yield
    except requests.RequestException as exc:
        raise ShipError(
            f"{action} {ref.target}: the registry is unreachable ({type(exc).__name__}): {exc}"
        ) from None
    except ValueError as exc:  # oras reports refused requests (401, 404, ...) as ValueError
        raise ShipError(f"{action} {ref.target}: the registry refused: {exc}") from None


def _accepted(response: Any, ref: Reference) -> None:
    if response.status_code not in (200, 201, 202):
        raise ShipError(f"push {ref.target}: the registry answered {response.status_code} {response.reason}")


@dataclass(frozen=True)
class Pushed:
    reference: str
    layer_digest: str
    size: int


def push_archive(archive: Path, ref: Reference, run_id: str, plain_http: bool | None = None) -> Pushed:
    """Upload the archive as the artifact's one layer, the empty config, then the manifest."""
    if ref.digest:
        raise ShipError(f"push needs a tag, not a digest: {ref.target}", EXIT_BAD_INPUT)
    digest, size = file_digest(archive)
    layer = {"mediaType": LAYER_MEDIA_TYPE, "digest": digest, "size": size,
             "annotations": {TITLE: f"{run_id}.tar.gz"}}
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": EMPTY_CONFIG,
        "layers": [layer],
        "annotations": listing_annotations(archive, run_id),
    }  # fmt: skip
    registry, container = _registry(ref, plain_http)
    with _transport_errors("push", ref), tempfile.TemporaryDirectory(prefix="assay-oci-") as tmp:
        empty = Path(tmp) / "config.json"
        empty.write_bytes(b"{}")
        for path, descriptor in ((archive, layer), (empty, EMPTY_CONFIG)):
            _accepted(registry.upload_blob(str(path), container, dict(descriptor)), ref)
        _accepted(registry.upload_manifest(manifest, container), ref)
    return Pushed(ref.target, digest, size)


def _layer(manifest: dict[str, Any], ref: Reference) -> dict[str, Any]:
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        found = manifest.get("artifactType")
        raise ShipError(
            f"pull {ref.target}: not an assay-runner archive "
            f"(artifactType {found!r}, expected {ARTIFACT_TYPE})",
            EXIT_BAD_INPUT,
        )
    layers = manifest.get("layers") or []
    if len(layers) != 1 or layers[0].get("mediaType") != LAYER_MEDIA_TYPE:
        raise ShipError(f"pull {ref.target}: expected one layer of {LAYER_MEDIA_TYPE}", EXIT_BAD_INPUT)
    layer = layers[0]
    if not isinstance(layer.get("digest"), str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", layer["digest"]):
        raise ShipError(f"pull {ref.target}: the layer has no sha256 digest", EXIT_BAD_INPUT)
    return layer


def pull_archive(ref: Reference, outdir: Path, plain_http: bool | None = None, force: bool = False) -> Path:
    """Fetch the layer into OUTDIR under its title (a run id's name, else the digest), digest checked
    before the file appears; a mismatch leaves nothing behind."""
    registry, container = _registry(ref, plain_http)
    with _transport_errors("pull", ref):
        manifest = registry.get_manifest(container, allowed_media_type=[MANIFEST_MEDIA_TYPE])
    layer = _layer(manifest, ref)
    title = (layer.get("annotations") or {}).get(TITLE, "")
    safe = isinstance(title, str) and SAFE_TITLE.fullmatch(title)
    name = title if safe else f"{layer['digest'][7:]}.tar.gz"
    final = outdir / name
    if final.exists() and not force:
        raise ShipError(f"pull: {final} exists: remove it or pass --force", EXIT_BAD_INPUT)
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=outdir)
    os.close(fd)
    try:
        with _transport_errors("pull", ref):
            registry.download_blob(container, layer["digest"], temp)
        digest, size = file_digest(Path(temp))
        if digest != layer["digest"] or size != layer.get("size"):
            raise ShipError(f"pull {ref.target}: the layer's bytes are {digest} ({size} bytes), the manifest "
                            f"says {layer['digest']} ({layer.get('size')} bytes); nothing was written",
                            EXIT_BAD_INPUT)  # fmt: skip
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(temp, 0o666 & ~mask)  # mkstemp's 0600 is for the unchecked bytes only
        os.replace(temp, final)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return final
