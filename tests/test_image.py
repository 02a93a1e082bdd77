"""The container image, really built and run against the host kernel (issue 13).

`make image` builds it (debootstrapped base, the host's extra CA for pip
behind a TLS-intercepting proxy); then the `docker run` line of
docs/setup.md runs `doctor` and a `run` whose archive must validate and hold
the kernel evidence of the command. The build's line with the image size is
printed to the terminal, also under `pytest -q`. This test always runs in
`make test` (CI included): warm, it takes 10 to 30 s (docs/setup.md).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.host.mounts import cgroup2_mount
from tests.image_support import checkout_tag, docker, docker_daemon, run_line
from tests.support import CLI, ROOT, Archive
from tests.test_doctor import CHECKS

pytestmark = [pytest.mark.kernel, pytest.mark.image]


@dataclass(frozen=True)
class Built:
    tag: str
    report: str  # make image's last line: time and size


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """Build the image with `make image` under a running daemon (kept up for the tests)."""
    logs = tmp_path_factory.mktemp("docker")
    with docker_daemon(logs / "dockerd.log") as daemon:
        tag = checkout_tag()
        proc = subprocess.run(
            ["make", "-s", "image", f"IMAGE={tag}"], cwd=ROOT, capture_output=True, text=True,
            timeout=1800, stdin=subprocess.DEVNULL, check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = [line for line in proc.stdout.splitlines() if line.startswith("image: built ")]
        assert len(lines) == 1, proc.stdout
        yield Built(tag, f"{lines[0]} (docker daemon {daemon})")


@pytest.fixture
def image(built: Built) -> str:
    return built.tag


def run_in_image(image: str, runs: Path, *args: str,
                 extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return docker("run", *run_line(image, runs, extra), *args, timeout=300)


def test_image_size_is_reported(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    size = int(docker("image", "inspect", "-f", "{{.Size}}", built.tag).stdout)
    assert f"({size} bytes)" in built.report, built.report
    with capsys.disabled():  # shown under `pytest -q` too: CI logs carry the size
        print(f"\n{built.report}")
    # The single-stage image issue 13 replaced was 1.25 GB: stay well below it.
    assert size < 600_000_000, size


def test_doctor_passes_in_the_container(image: str, tmp_path: Path) -> None:
    proc = run_in_image(image, tmp_path, "doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[1] for line in lines] == list(CHECKS)
    for line in lines:
        assert line.split()[0] in ("ok", "warn"), line
    assert "CAP_SYS_ADMIN" in lines[0]


def test_run_in_the_container_writes_an_archive_that_validates(image: str, tmp_path: Path) -> None:
    run_id = f"image-smoke-{os.getpid()}"
    marker = f"/tmp/assay-image-smoke-{os.getpid()}"
    proc = run_in_image(image, tmp_path, "run", "--out", "/runs", "--run-id", run_id, "--",
                        "sh", "-c", f"echo evidence > {marker}; cat /etc/debian_version")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    archive = tmp_path / f"{run_id}.tar.gz"
    inside = run_in_image(image, tmp_path, "validate", f"/runs/{archive.name}")
    assert inside.returncode == 0, inside.stdout + inside.stderr
    outside = subprocess.run([*CLI, "validate", str(archive)], capture_output=True, text=True,
                             check=False)
    assert outside.returncode == 0, outside.stdout + outside.stderr
    # A run that sees no kernel events still validates: require the evidence.
    got = Archive(archive)
    assert got.health["cgroup_correlation"] == "clean", got.health
    assert got.health["kernel_layer"] == "complete", got.health
    assert marker in got.surface["filesystem_paths"]
    assert "/etc/debian_version" in got.surface["filesystem_paths"]
    assert {"/usr/bin/sh", "/usr/bin/cat"} <= set(got.surface["process_execs"])


def test_doctor_refuses_a_container_in_its_own_pid_namespace(image: str, tmp_path: Path) -> None:
    """Without --pid host the BPF side sees host pids the runner does not know."""
    line = run_line(image, tmp_path)
    at = line.index("--pid")
    del line[at:at + 2]
    proc = docker("run", *line, "doctor", timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    hostns = [row for row in proc.stdout.splitlines() if row.split()[1] == "hostns"]
    assert hostns and hostns[0].startswith("FAIL") and "--pid host" in hostns[0], proc.stdout


def test_isolated_network_needs_and_works_with_net_admin(image: str, tmp_path: Path) -> None:
    proc = run_in_image(image, tmp_path, "run", "--out", "/runs", "--run-id",
                        f"image-net-{os.getpid()}", "--net", "isolated", "--",
                        "cat", "/proc/net/dev", extra=("--cap-add", "NET_ADMIN"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lo:" in proc.stdout and "eth0" not in proc.stdout, proc.stdout


def test_read_only_cgroup2_from_docker_is_made_writable(image: str, tmp_path: Path) -> None:
    """Docker gives a container without --privileged a read-only cgroup v2 (on v2 hosts).

    Reproduced on any host by binding the host's cgroup v2 mount read-only:
    the entrypoint must clear the flag, and doctor's write probe must pass.
    """
    host = str(cgroup2_mount())
    proc = run_in_image(image, tmp_path, "doctor", extra=("-v", f"{host}:{host}:ro"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"made the read-only mount at {host} writable" in proc.stderr, proc.stderr
    cgroup2 = [row for row in proc.stdout.splitlines() if row.split()[1] == "cgroup2"]
    assert cgroup2 and cgroup2[0].startswith("ok") and cgroup2[0].endswith("writable"), proc.stdout
