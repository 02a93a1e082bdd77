"""Capture details against the real kernel: peers, paths, exit codes, drops."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import ROOT, Archive, run_observed

from normalizer.decode import decode
from runner.capture.cgroup import parent_name
from runner.host.mounts import cgroup2_mount
from spool.format import read_spool

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
PROGRAMS = ROOT / "tests" / "programs"


def test_network_peers(tmp_path: Path) -> None:
    proc = run_observed(tmp_path, "net", PY, PROGRAMS / "net_peers.py", tmp_path, workdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "net.tar.gz")
    assert archive.values("connect") == ["127.0.0.1:9", "[::1]:10", f"unix:{tmp_path}/sock"]
    assert archive.values("event_6") == ["127.0.0.1:5353", "unix:@abstract-peer"]
    assert archive.values("event_7") == ["127.0.0.2:5354"]
    assert {e["event_type"] for e in archive.kernel if e["kind"] == "event_6"} == {6}
    h = archive.health
    assert h["network_protocol_coverage"] == "connect_and_datagram_peer_observed"
    assert h["network_endpoint_claim_scope"] == "diagnostic_only"
    assert archive.surface["network_endpoints"] == sorted(  # datagram peers too, as Assay builds it
        ["127.0.0.1:9", "[::1]:10", f"unix:{tmp_path}/sock", "127.0.0.1:5353", "unix:@abstract-peer",
         "127.0.0.2:5354"])


def test_dirfd_fchdir_and_dotdot_paths(tmp_path: Path) -> None:
    proc = run_observed(tmp_path, "paths", PY, PROGRAMS / "dirfd_paths.py", workdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "paths.tar.gz")
    opens = {e["value"]: e for e in archive.kernel if e["kind"] == "openat"}
    d = tmp_path / "d"
    assert "operation_flags" not in opens[str(d)]  # O_DIRECTORY is no Assay hint: it is in flags
    assert opens[str(d)]["flags"] & 0o200000
    assert opens[str(d / "via-dirfd.txt")]["mode"] == 0o600
    assert opens[str(d / "after-fchdir.txt")]["operation_flags"] == ["create", "append"]  # Assay's order
    top = opens[str(tmp_path / "top.txt")]
    # O_EXCL without O_NOCTTY: Assay reads `exclusive` from 0o400, so no list would pass its check;
    # the hints are left out and flags carry O_CREAT|O_EXCL (docs/artifacts.md)
    assert (top["access_mode"], "operation_flags" in top) == ("read_write", False)
    assert top["flags"] & 0o300 == 0o300
    assert not any(n.startswith("s2_path_resolution") for n in archive.health["notes"])


@pytest.mark.parametrize(("script", "code"), [("exit 7", 7), ("kill -TERM $$", 143)])
def test_exit_code_is_the_commands(tmp_path: Path, script: str, code: int) -> None:
    proc = run_observed(tmp_path, "code", "sh", "-c", script, workdir=tmp_path)
    assert proc.returncode == code
    assert Archive(tmp_path / "code.tar.gz").health["kernel_layer"] == "complete"


def test_background_leftovers_are_killed_and_cgroup_removed(tmp_path: Path) -> None:
    parent = cgroup2_mount() / parent_name()

    def bg_cgroups() -> set[str]:  # other runs (benchmarks, ...) may be live: only ours count
        return {p.name for p in parent.glob("bg-*")} if parent.exists() else set()

    before = bg_cgroups()
    proc = run_observed(tmp_path, "bg", "sh", "-c", "sleep 600 & echo started", workdir=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "started\n"
    assert bg_cgroups() <= before
    leftover = [p for p in Path("/proc").glob("[0-9]*")
                if (p / "cmdline").exists() and (p / "cmdline").read_bytes() == b"sleep\x00600\x00"]
    assert leftover == []


def test_tiny_ring_buffer_drops_are_honest(tmp_path: Path) -> None:
    """captured + dropped opens == the opens the same flood makes with a big buffer.

    Four floods at once outpace the reader on a one-page buffer every time;
    a single Python flood sometimes does not.
    """
    flood = f"{PY} {PROGRAMS / 'open_flood.py'} 20000"
    script = f"{flood} & {flood} & {flood} & {flood} & wait"
    big = run_observed(tmp_path, "big", "sh", "-c", script, workdir=tmp_path,
                       extra=("--ringbuf-pages", "8192"))
    tiny = run_observed(tmp_path, "tiny", "sh", "-c", script, workdir=tmp_path,
                        extra=("--ringbuf-pages", "1"))
    assert big.returncode == tiny.returncode == 0

    def raw_opens(run_id: str) -> tuple[int, dict[str, int], dict[str, int]]:
        spool = read_spool(tmp_path / f"{run_id}.spool")
        opens = sum(1 for e in decode(spool.records) if e.hook == 1)
        return opens, spool.trailer.drops, spool.trailer.emitted

    full, full_drops, _ = raw_opens("big")
    captured, drops, emitted = raw_opens("tiny")
    assert sum(full_drops.values()) == 0
    assert full >= 4 * 20000
    assert drops["open"] > 0
    assert captured + drops["open"] == full
    assert emitted["open"] == captured

    health = Archive(tmp_path / "tiny.tar.gz").health
    assert health["kernel_layer"] == "partial_ringbuf_drops"
    assert health["ringbuf_drops"] == sum(drops.values())
    assert any(n.startswith("s2_kernel_drops: ") and f"open={drops['open']}" in n
               for n in health["notes"])
    full_health = Archive(tmp_path / "big.tar.gz").health
    assert (full_health["kernel_layer"], full_health["ringbuf_drops"]) == ("complete", 0)


def test_more_threads_than_in_flight_slots_lose_nothing(tmp_path: Path) -> None:
    """Exited threads give their in-flight slot back (16,384 slots, 20,000 threads)."""
    proc = run_observed(tmp_path, "threads", PY, PROGRAMS / "many_threads.py", "20000", workdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "threads.tar.gz")
    created = [e for e in archive.kernel if e["kind"] == "openat" and e["value"].startswith(f"{tmp_path}/t/")]
    assert len(created) == 20000
    assert (archive.health["kernel_layer"], archive.health["ringbuf_drops"]) == ("complete", 0)
