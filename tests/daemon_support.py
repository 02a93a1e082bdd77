"""Helpers for the daemon's kernel tests: throwaway users and groups, a daemon on a temp socket.

Every user and group is created with a unique name for one test module and
deleted afterwards; the daemon's socket lives in a fresh directory under
/tmp that those users can reach (pytest's tmp_path is root-only).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLI = [sys.executable, "-m", "runner.cli.main"]


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(self.home), "USER": self.name,
                "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **extra}

    def run(self, args: list[str | Path], cwd: Path, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`args` as this user (its uid, gid and groups), output captured."""
        return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, user=self.uid, group=self.gid,
                              extra_groups=list(self.groups), env=env or self.env(),
                              stdin=subprocess.DEVNULL)

    def popen(self, args: list[str | Path], cwd: Path) -> subprocess.Popen[str]:
        return subprocess.Popen([str(a) for a in args], cwd=cwd, text=True, user=self.uid, group=self.gid,
                                extra_groups=list(self.groups), env=self.env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def workspace(self, root: Path, name: str) -> Path:
        """A fresh directory under `root` owned by this user."""
        path = root / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        os.chown(path, self.uid, self.gid)
        return path


class Accounts:
    """Groups and users made for one test module, removed on close."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.users: list[str] = []
        self.groups: list[str] = []

    def group(self, label: str) -> str:
        name = f"ad{label}{self.tag}"
        subprocess.run(["groupadd", name], check=True)
        self.groups.append(name)
        return name

    def user(self, label: str, groups: tuple[str, ...] = ()) -> User:
        name = f"ad{label}{self.tag}"
        args = ["useradd", "--create-home", "--shell", "/bin/sh"]
        if groups:
            args += ["--groups", ",".join(groups)]
        subprocess.run([*args, name], check=True)
        self.users.append(name)
        entry = pwd.getpwnam(name)
        gids = tuple(sorted(set(os.getgrouplist(name, entry.pw_gid))))
        return User(name, entry.pw_uid, entry.pw_gid, gids, Path(entry.pw_dir))

    def close(self) -> None:
        for name in self.users:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        for name in self.groups:
            with contextlib.suppress(KeyError):
                grp.getgrnam(name)
                subprocess.run(["groupdel", name], capture_output=True)


def shared_tmp() -> Path:
    """A directory under /tmp every test user can traverse (but not write)."""
    path = Path(tempfile.mkdtemp(prefix="assay-daemon-test-", dir="/tmp"))
    path.chmod(0o755)
    return path


class DaemonProcess:
    """`assay-runner daemon` with a config written for the test, logs kept for failures."""

    def __init__(self, root: Path, config: str) -> None:
        self.root = root
        self.socket = root / "sock" / "runner.sock"
        self.config = root / "daemon.toml"
        self.config.write_text(f'version = 1\n[socket]\npath = "{self.socket}"\n' + config)
        self.log = root / "daemon.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([*CLI, "--log-format", "json", "daemon", "--config", self.config],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start: {self.log.read_text()}")
            time.sleep(0.05)
        self.socket.parent.chmod(0o755)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def logs(self) -> str:
        return self.log.read_text()


@contextlib.contextmanager
def daemon(root: Path, config: str) -> Iterator[DaemonProcess]:
    d = DaemonProcess(root, config)
    try:
        yield d
    finally:
        d.stop()
