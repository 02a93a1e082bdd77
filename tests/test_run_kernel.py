"""`assay-runner run` against the real kernel: what a command did shows up."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import CLI, Archive, assay, run_observed, runner_env

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
NOISE = re.compile(
    r"^(/etc/ld\.so\.cache|/lib|/usr/lib/|/usr/share/locale/|/etc/localtime|/proc/|/sys/|/dev/)"
)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, Path, object]:
    """A small example command (cd, write, read, connect), run once for the assertions below."""
    work = tmp_path_factory.mktemp("work")
    (work / "sub").mkdir()
    out = tmp_path_factory.mktemp("out")
    script = (
        "cd sub && echo hi > out.txt; cat /etc/hostname; "
        f'{PY} -c "import socket; s=socket.socket(); s.connect_ex((\\"127.0.0.1\\", 9))"'
    )
    proc = run_observed(out, "example", "sh", "-c", script, workdir=work)
    assert proc.returncode == 0, proc.stderr
    return Archive(out / "example.tar.gz"), work, proc


def _open(archive: Archive, path: str) -> list[dict]:
    return [e for e in archive.kernel if e["kind"] == "openat" and e["value"] == path]


def test_exec_of_cat_is_recorded(example) -> None:
    archive, _, _ = example
    assert "/usr/bin/cat" in archive.values("exec")
    assert "/usr/bin/sh" in archive.values("exec")


def test_relative_write_is_resolved_with_open_metadata(example) -> None:
    archive, work, _ = example
    (event,) = _open(archive, str(work / "sub" / "out.txt"))
    assert event["access_mode"] == "write"
    assert event["operation_flags"] == ["create", "truncate"]
    # success: no fd number (allocation state, not evidence), hence no status (it needs return_value)
    assert "return_value" not in event and "status" not in event
    assert event["flags"] & 0o3 == 1
    assert event["mode"] == 0o666


def test_read_of_etc_hostname(example) -> None:
    archive, _, _ = example
    (event,) = _open(archive, "/etc/hostname")
    assert event["access_mode"] == "read"
    assert "operation_flags" not in event  # empty: omitted, as upstream writes it


def test_connect_endpoint(example) -> None:
    archive, _, _ = example
    assert archive.values("connect") == ["127.0.0.1:9"]
    assert archive.health["network_protocol_coverage"] == "connect_only"
    assert archive.health["network_endpoint_claim_scope"] == "diagnostic_only"


def test_no_loader_or_locale_noise(example) -> None:
    archive, _, _ = example
    noisy = [e["value"] for e in archive.kernel if e["kind"] == "openat" and NOISE.match(e["value"] or "")]
    assert noisy == []
    assert not any((e["value"] or "").endswith(("pyvenv.cfg", "._pth")) for e in archive.kernel)


def test_surface_lists_sorted_sets(example) -> None:
    archive, work, _ = example
    surface = archive.surface
    assert {"/etc/hostname", str(work / "sub" / "out.txt")} <= set(surface["filesystem_paths"])
    assert surface["network_endpoints"] == ["127.0.0.1:9"]
    assert {"/usr/bin/cat", "/usr/bin/sh", PY} <= set(surface["process_execs"])
    for key in ("filesystem_paths", "network_endpoints", "process_execs", "mcp_tools", "policy_decisions"):
        assert surface[key] == sorted(set(surface[key])), key


def test_passing_health_and_clean_correlation(example) -> None:
    archive, _, _ = example
    h = archive.health
    assert (h["kernel_layer"], h["ringbuf_drops"], h["cgroup_correlation"]) == ("complete", 0, "clean")
    assert h["notes"][0] == "redaction: mode=shape_only redacted_count=0"
    assert h["notes"][1].startswith("s2_kernel_capture: monitor_events=")
    assert archive.json("correlation-report.json")["status"] == "clean"


def test_pids_are_tree_positions_and_seq_is_dense(example) -> None:
    archive, _, _ = example
    kernel = archive.kernel
    assert [e["seq"] for e in kernel] == list(range(len(kernel)))
    assert kernel[0]["pid"] == 1 and kernel[0]["value"] == "/usr/bin/sh"
    pids = [e["pid"] for e in kernel]
    assert pids == sorted(pids)
    cat_pid = next(e["pid"] for e in kernel if e["value"] == "/usr/bin/cat")
    assert _open(archive, "/etc/hostname")[0]["pid"] == cat_pid


def test_archive_validates_and_summary_names_it(example) -> None:
    archive, _, proc = example
    check = assay("validate", archive.path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert str(archive.path) in proc.stderr
    assert "programs executed" in proc.stderr


def test_normalize_spool_reproduces_the_archive(example, tmp_path: Path) -> None:
    """The run's archive came from the live pass (runner/capture/live.py); offline gives the same bytes."""
    archive, _, run = example
    assert '"normalized_by": "live"' in run.stderr
    spool = archive.path.with_name("example.spool")
    again = tmp_path / "again.tar.gz"
    proc = assay("normalize", spool, "--out", again)
    assert proc.returncode == 0, proc.stderr
    assert again.read_bytes() == archive.path.read_bytes()


def test_a_small_locked_memory_limit_loads_the_monitor_and_stays_the_commands(tmp_path: Path) -> None:
    """Before Linux 5.11, BPF maps count against RLIMIT_MEMLOCK (Debian 11's 5.10 refused the
    monitor's maps under its usual 8 MiB): the runner lifts the limit for itself where the kernel
    refuses (BCC's compile lifts it too, and is undone), and the command still runs under the limit
    it was started with. Twice: the first run compiles the monitor (an empty object cache), the
    second loads what it compiled."""
    limit = 64 * 1024
    # set in the runner's own process by a wrapper that execs it (a preexec_fn can deadlock a
    # threaded test process between fork and exec)
    under_limit = [PY, "-c", "import os, resource, sys; resource.setrlimit(resource.RLIMIT_MEMLOCK, "
                   f"({limit}, {limit})); os.execv(sys.argv[1], sys.argv[1:])"]
    show = "import resource; print(*resource.getrlimit(resource.RLIMIT_MEMLOCK))"
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    for attempt in range(2):
        proc = subprocess.run([*under_limit, *CLI, "run", "--out", tmp_path, "--run-id", f"memlock-{attempt}",
                               "--", PY, "-c", show], capture_output=True, text=True, timeout=300,
                              env=runner_env(ASSAY_RUNNER_BPF_CACHE=str(cache)), stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [str(limit), str(limit)]
        assert Archive(tmp_path / f"memlock-{attempt}.tar.gz").health["kernel_layer"] == "complete"
    assert list(cache.glob("*.bpfo")), "the first run compiled into the test's cache"
