"""Capture details against the real kernel: peers, paths, exit codes, drops."""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path

import pytest

from normalizer.decode import decode
from runner.capture.phases import HOLD_ENV
from spool.format import Batch, Phase, iter_frames, read_spool
from tests.support import ROOT, Archive, run_cgroups, run_observed, runner_env, unique_run_id

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
    """The command's own background sleep (its argv unique to this test) dies with the run.

    Only this run's process and cgroup are looked for: other tests, xdist
    workers and benchmarks may run their own `sleep`s and runs meanwhile.
    """
    run_id = unique_run_id("bg")
    naptime = f"600.{secrets.randbelow(10**6):06d}"  # GNU sleep takes fractions: an argv no one else has
    proc = run_observed(tmp_path, run_id, "sh", "-c", f"sleep {naptime} & echo started", workdir=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "started\n"
    assert run_cgroups(run_id) == []
    argv = f"sleep\0{naptime}\0".encode()
    leftover = []
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):  # processes come and go while we look
            if (p / "cmdline").read_bytes() == argv:
                leftover.append(p.name)
    assert leftover == []


def test_tiny_ring_buffer_drops_are_honest(tmp_path: Path) -> None:
    """captured + dropped opens == the opens the same flood makes with a big buffer.

    The tiny run's reader is held (HOLD_ENV: it reads only after the command
    exits), so the flood overflows the one-page ring whatever the reader's
    speed; the big run reads as usual.
    """
    flood = (PY, PROGRAMS / "open_flood.py", "5000")
    big = run_observed(tmp_path, "big", *flood, workdir=tmp_path, extra=("--ringbuf-pages", "8192"))
    tiny = run_observed(tmp_path, "tiny", *flood, workdir=tmp_path, extra=("--ringbuf-pages", "1"),
                        env=runner_env(**{HOLD_ENV: "1"}))
    assert big.returncode == tiny.returncode == 0

    def raw_opens(run_id: str) -> tuple[int, dict[str, int], dict[str, int]]:
        spool = read_spool(tmp_path / f"{run_id}.spool")
        opens = sum(1 for e in decode(spool.records) if e.hook == 1)
        return opens, spool.trailer.drops, spool.trailer.emitted

    full, full_drops, _ = raw_opens("big")
    captured, drops, emitted = raw_opens("tiny")
    assert sum(full_drops.values()) == 0
    assert full >= 5000
    assert drops["open"] > 0 and captured > 0  # the held ring overflowed; what it held was drained
    assert captured + drops["open"] == full
    assert emitted["open"] == captured

    health = Archive(tmp_path / "tiny.tar.gz").health
    assert health["kernel_layer"] == "partial_ringbuf_drops"
    assert health["ringbuf_drops"] == sum(drops.values())
    assert any(n.startswith("s2_kernel_drops: ") and f"open={drops['open']}" in n
               for n in health["notes"])
    full_health = Archive(tmp_path / "big.tar.gz").health
    assert (full_health["kernel_layer"], full_health["ringbuf_drops"]) == ("complete", 0)


def test_a_held_reader_with_room_in_the_ring_loses_nothing(tmp_path: Path) -> None:
    """The control for the drop test: holding the reader alone drops nothing, the ring does."""
    proc = run_observed(tmp_path, "held", PY, PROGRAMS / "open_flood.py", "500", workdir=tmp_path,
                        extra=("--ringbuf-pages", "8192"), env=runner_env(**{HOLD_ENV: "1"}))
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "held.spool", "rb") as f:
        frames = list(iter_frames(f))
    exited = next(i for i, f in enumerate(frames) if isinstance(f, Phase) and f.name == "command_exited")
    flood_at = [i for i, f in enumerate(frames) if isinstance(f, Batch)
                for e in decode(f.records) if e.hook == 1 and b"flood-" in e.data]
    assert len(flood_at) == 500
    assert min(flood_at) > exited  # not one of them was read while the command ran
    health = Archive(tmp_path / "held.tar.gz").health
    assert (health["kernel_layer"], health["ringbuf_drops"]) == ("complete", 0)


def test_more_threads_than_in_flight_slots_lose_nothing(tmp_path: Path) -> None:
    """Exited threads give their in-flight slot back (16,384 slots, 20,000 threads).

    The reader is held and the ring holds the whole run (32 MiB), so a reader
    slowed by a busy machine cannot turn this into a drop test.
    """
    proc = run_observed(tmp_path, "threads", PY, PROGRAMS / "many_threads.py", "20000", workdir=tmp_path,
                        extra=("--ringbuf-pages", "8192"), env=runner_env(**{HOLD_ENV: "1"}))
    assert proc.returncode == 0, proc.stderr
    archive = Archive(tmp_path / "threads.tar.gz")
    created = [e for e in archive.kernel if e["kind"] == "openat" and e["value"].startswith(f"{tmp_path}/t/")]
    assert len(created) == 20000
    assert (archive.health["kernel_layer"], archive.health["ringbuf_drops"]) == ("complete", 0)
