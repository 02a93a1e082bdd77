"""The container image, really built and run against the host kernel.

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
from test_doctor import CHECKS

from runner.host.mounts import cgroup2_mount
from tests.image_support import cache_volume, checkout_tag, docker, docker_daemon, run_line
from tests.support import CLI, ROOT, Archive

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
        try:
            yield Built(tag, f"{lines[0]} (docker daemon {daemon})")
        finally:
            docker("volume", "rm", "--force", cache_volume(), timeout=60)


@pytest.fixture
def image(built: Built) -> str:
    return built.tag


def run_in_image(image: str, runs: Path, *args: str,
                 extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return docker("run", *run_line(image, runs, extra), *args, timeout=300)


VENV_BIN = "/opt/assay-runner/.venv/bin"
IN_USE = (
    "import sys; from pathlib import Path; from ebpf import ringsink; from normalizer import accel; "
    "b = Path(sys.executable).parent; "
    "print(ringsink.available(), accel.native is not None, "
    "(b / 'assay-runner').read_bytes()[:4] == b'\\x7fELF', "
    "(b / 'assay-runner-py').read_text().startswith('#!'))"
)
"""What the runner asks before taking each fast path, and which program each CLI name is."""


def in_image(image: str, entrypoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A program of the image run directly (no mounts, no capabilities: nothing here needs them)."""
    return docker("run", "--rm", "--entrypoint", entrypoint, image, *args, timeout=300)


def test_every_c_piece_is_in_use_in_the_image(image: str) -> None:
    """The ring consumer, the normalizer accelerator and the fast client: built in the build
    stage, loaded by the final stage's Python (the build fails otherwise: Dockerfile)."""
    direct = in_image(image, f"{VENV_BIN}/python", "-c", IN_USE)
    assert direct.returncode == 0, direct.stdout + direct.stderr
    assert direct.stdout.split() == ["True", "True", "True", "True"], direct.stdout
    report = in_image(image, f"{VENV_BIN}/python", "-m", "runner.host.native")
    assert report.returncode == 0, report.stdout + report.stderr
    assert [line.split()[:2] for line in report.stdout.splitlines()] == [
        ["ok", "ringsink"], ["ok", "fastscan"], ["ok", "framescan"], ["ok", "fastclient"]], report.stdout
    # No compiler in the final image: the pieces came from the build stage.
    gcc = in_image(image, "/bin/sh", "-c", "command -v gcc cc || echo none")
    assert gcc.stdout == "none\n", gcc.stdout


def test_image_size_is_reported(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    size = int(docker("image", "inspect", "-f", "{{.Size}}", built.tag).stdout)
    assert f"({size} bytes)" in built.report, built.report
    with capsys.disabled():  # shown under `pytest -q` too: CI logs carry the size
        print(f"\n{built.report}")
    # A single-stage image of the same content is 1.25 GB: stay well below it.
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
    proc = run_in_image(image, tmp_path, "--log-format", "json", "run", "--out", "/runs", "--run-id", run_id,
                        "--", "sh", "-c", f"echo evidence > {marker}; cat /etc/debian_version")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The run read the ring with the C consumer (its log line, asked for as JSON).
    assert '"ring_consumer": "c"' in proc.stderr, proc.stderr
    archive = tmp_path / f"{run_id}.tar.gz"
    inside = run_in_image(image, tmp_path, "validate", f"/runs/{archive.name}")
    assert inside.returncode == 0, inside.stdout + inside.stderr
    # The image's `assay-runner` (the C client) hands validate to the Python CLI.
    fast = docker("run", "--rm", "-v", f"{tmp_path}:/runs", "--entrypoint", f"{VENV_BIN}/assay-runner", image,
                  "validate", f"/runs/{archive.name}", timeout=300)
    assert fast.returncode == 0 and fast.stdout == inside.stdout, fast.stdout + fast.stderr
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


def test_the_documented_line_keeps_the_bpf_cache_and_logs_text(image: str, tmp_path: Path) -> None:
    """The named volume keeps the compiled program from one `docker run` to the next; without -t the
    logs are text lines, not JSON, beside the summary."""
    runs = [run_in_image(image, tmp_path, "--log-format", "json", "run", "--out", "/runs", "--run-id",
                         f"cache-{n}-{os.getpid()}", "--", "true") for n in (1, 2)]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert '"compiled_now": false' in runs[1].stderr, runs[1].stderr  # loaded from the volume
    plain = run_in_image(image, tmp_path, "run", "--out", "/runs", "--run-id", f"text-{os.getpid()}", "--",
                         "true")
    assert plain.returncode == 0, plain.stderr
    assert "assay-runner: command exited 0" in plain.stderr
    assert not any(line.startswith("{") for line in plain.stderr.splitlines()), plain.stderr
