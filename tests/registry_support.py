"""A real OCI registry for the tests: Debian's `docker-registry` (CNCF distribution 2.8), no mock.

Each `Registry` is its own process on a free 127.0.0.1 port with its own
storage directory, optionally behind htpasswd basic auth, so tests never
share a registry with each other or with a registry the host runs. `stop()`
and `start()` keep the storage, which is how a test takes the registry away
and brings it back. Ready means `/v2/` answers (200, or 401 with auth).
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt

BINARY = str(Path(__file__).resolve().parent.parent / ".venv/registry/usr/bin/docker-registry")
"""Unpacked from Debian's package by scripts/setup.sh (the package would start a service on :5000)."""
READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Registry:
    root: Path
    user: str | None = None
    password: str | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _config(self) -> Path:
        storage = self.root / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        lines = [
            "version: 0.1",
            "log: {level: warn}",
            f"storage: {{filesystem: {{rootdirectory: {storage}}}, delete: {{enabled: true}}}}",
            f"http: {{addr: '{self.host}'}}",
        ]
        if self.user:
            assert self.password is not None
            htpasswd = self.root / "htpasswd"
            digest = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
            htpasswd.write_text(f"{self.user}:{digest}\n")
            lines.append(f"auth: {{htpasswd: {{realm: test, path: {htpasswd}}}}}")
        config = self.root / "config.yml"
        config.write_text("\n".join(lines) + "\n")
        return config

    def start(self) -> Registry:
        if not Path(BINARY).is_file():
            raise RuntimeError(f"{BINARY} is missing: run make setup (it installs docker-registry)")
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "registry.log", "ab")  # noqa: SIM115 (kept open by the process)
        self.proc = subprocess.Popen([BINARY, "serve", str(self._config())], stdout=log, stderr=log)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log_text = (self.root / "registry.log").read_text()
                raise RuntimeError(f"registry exited {self.proc.returncode}: {log_text}")
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1).close()
                return self
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    return self
            except OSError:
                time.sleep(0.05)  # polling for readiness, bounded by the deadline
        raise RuntimeError("registry did not answer /v2/ in time")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def blob_path(self, digest: str) -> Path:
        """Where the filesystem driver keeps a blob's bytes (to damage it on purpose)."""
        hexd = digest.removeprefix("sha256:")
        return self.root / "storage" / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"

    def docker_config(self, directory: Path) -> Path:
        """A DOCKER_CONFIG directory whose config.json holds this registry's credentials."""
        directory.mkdir(parents=True, exist_ok=True)
        auths = {}
        if self.user:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            auths[self.host] = {"auth": token}
        (directory / "config.json").write_text(json.dumps({"auths": auths}))
        return directory
