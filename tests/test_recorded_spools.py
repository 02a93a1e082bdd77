"""Normalizer stages that need policy, SDK or network set-up, fed with recorded spools.

No root and no BPF: the spools in tests/data/ were recorded from real runs by
scripts/record_spools.py (tests/data/README.md says with which command).
Each test checks a stage against what the raw records say, read here with the
wire decoder only, and then shows the stage is what made the difference by
taking its input away (the NET_BLOCK records, the DAC verdicts, the SDK frames).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import msgspec
import pytest

from ebpf.wire import HOOK_CONNECT, HOOK_NET_BLOCK, HOOK_OPEN, HOOK_SENDMSG, HOOK_SENDTO
from normalizer.build import dac_questions, normalize
from normalizer.decode import decode
from runner.evidence.archive import MANIFEST, build_manifest
from runner.evidence.validate import validate_members
from spool.format import Spool, read_spool
from tests.recount import raw_counts

DATA = Path(__file__).parent / "data"
FIXTURE_OUTSIDE = "/tmp/assay-fixture-outside.txt"  # fixtures/agent/fixture_tools.DEFAULT_OUTSIDE
DAC_ALLOWED, DAC_DENIED = "/tmp/assay-rec-outside.txt", "/tmp/rec/denied.txt"  # scripts/record_spools.py


def load(name: str) -> Spool:
    return read_spool(DATA / f"{name}.spool")


def members(spool: Spool) -> dict[str, bytes]:
    """The archive members, after the full conformance check every written archive gets."""
    got = {k: v if isinstance(v, bytes) else v.read_bytes() for k, v in normalize(spool).members().items()}
    assert validate_members({MANIFEST: build_manifest(spool.header.run_id, got), **got}) == []
    return got


def lines(got: dict[str, bytes], name: str) -> list[dict]:
    return [json.loads(line) for line in got[name].decode().splitlines() if line]


def values(got: dict[str, bytes], kind: str) -> list[str]:
    return [e["value"] for e in lines(got, "layers/kernel.ndjson") if e["kind"] == kind]


def without_hook(spool: Spool, hook: int) -> Spool:
    return msgspec.structs.replace(spool, records=[raw for raw, r in zip(spool.records, decode(spool.records),
                                                                       strict=True) if r.hook != hook])


# -- datagrams and network blocks ------------------------------------------------------------


def test_datagram_peers_and_blocks_from_the_recorded_network_run() -> None:
    got = members(load("network"))
    assert values(got, "event_6") == ["127.0.0.1:5353"]  # sendto with an address
    assert values(got, "event_7") == ["127.0.0.1:5353"]  # sendmsg with msg_name
    assert values(got, "connect") == ["[::1]:11"]  # allowed (refused by the peer, which is no block)
    assert sorted(values(got, "connect_blocked")) == ["127.0.0.2:5354", "[::1]:10"]
    health = json.loads(got["observation-health.json"])
    assert health["network_protocol_coverage"] == "connect_and_datagram_peer_observed"
    surface = json.loads(got["capability-surface.json"])
    endpoints = ["127.0.0.1:5353", "127.0.0.2:5354", "[::1]:10", "[::1]:11"]
    assert surface["network_endpoints"] == sorted(endpoints)


def test_one_network_denial_is_one_line() -> None:
    """Each NET_BLOCK record is followed by the EPERM attempt it stands for; only the block is kept."""
    spool = load("network")
    raw = list(decode(spool.records))
    network = (HOOK_CONNECT, HOOK_SENDTO, HOOK_SENDMSG)
    refused = [r for r in raw if r.hook in network and r.ret == -errno.EPERM]
    assert sorted(r.hook for r in refused) == sorted([HOOK_SENDTO, HOOK_CONNECT])
    assert sum(r.hook == HOOK_NET_BLOCK for r in raw) == 2
    got = members(spool)
    kernel = lines(got, "layers/kernel.ndjson")
    assert not any(e.get("return_value") == -errno.EPERM for e in kernel)
    # Without the block records the same attempts are plain failed network events:
    # the merge stage, not chance, is what kept them out.
    bare = members(without_hook(spool, HOOK_NET_BLOCK))
    assert values(bare, "connect_blocked") == []
    assert "127.0.0.2:5354" in values(bare, "event_6") and "[::1]:10" in values(bare, "connect")


# -- file blocks and DAC verdicts ------------------------------------------------------------


def test_policy_block_needs_a_dac_verdict_that_permissions_allowed() -> None:
    spool = load("dac")
    assert spool.header.uid != 0  # recorded as nobody: DAC verdicts decide
    assert spool.dac == {f"write:{DAC_ALLOWED}": True, f"write:{DAC_DENIED}": False}
    eacces = [r for r in decode(spool.records) if r.hook == HOOK_OPEN and r.ret == -errno.EACCES]
    assert len(eacces) == 2  # both writes outside the workspace failed the same way
    got = members(spool)
    kernel = lines(got, "layers/kernel.ndjson")
    blocked = [e for e in kernel if e["kind"] == "file_blocked"]
    assert [(e["value"], e["access_mode"], e["return_value"]) for e in blocked] == [
        (DAC_ALLOWED, "write", -13)]
    denied = [e for e in kernel if e["value"] == DAC_DENIED]
    assert [(e["kind"], e["status"], e["return_value"]) for e in denied] == [("openat", "error", -13)]
    # The questions the runner asked after the run are exactly the two refused writes.
    asked = dac_questions(msgspec.structs.replace(spool, dac={}))
    assert asked == sorted([("write", DAC_ALLOWED), ("write", DAC_DENIED)])


@pytest.mark.parametrize("verdicts", [{}, {f"write:{DAC_ALLOWED}": False}])
def test_no_block_is_claimed_without_a_verdict_that_allows_it(verdicts: dict[str, bool]) -> None:
    spool = msgspec.structs.replace(load("dac"), dac=verdicts)
    got = members(spool)
    assert values(got, "file_blocked") == []
    assert DAC_ALLOWED in values(got, "openat")


# -- SDK frames, tool decisions and correlation ----------------------------------------------


def test_sdk_frames_become_policy_and_sdk_lines_bound_to_kernel_events() -> None:
    spool = load("sdk")
    got = members(spool)
    calls = [m.tool_call_id for m in spool.sdk if m.event == "tool_call_started"]
    assert calls == ["tc_001", "tc_002", "tc_003", "tc_004", "tc_005"]
    policy = lines(got, "layers/policy.ndjson")
    assert [(p["tool_call_id"], p["decision"]) for p in policy] == [
        ("tc_001", "allow"), ("tc_002", "allow"), ("tc_003", "deny"), ("tc_004", "deny"), ("tc_005", "deny")]
    sdk = lines(got, "layers/sdk.ndjson")
    assert len(sdk) == sum(m.event.startswith("tool_call_") for m in spool.sdk)
    report = json.loads(got["correlation-report.json"])
    reported = {b["tool_call_id"]: b["kernel_event_count"] for b in report["bindings"]}
    assert reported == raw_counts(spool)  # the independent recount (tests/recount.py)
    assert reported["tc_005"] == 0 and all(reported[c] >= 1 for c in calls[:4])
    assert values(got, "file_blocked") == [FIXTURE_OUTSIDE]
    assert values(got, "connect_blocked") == ["127.0.0.1:9999"]
    health = json.loads(got["observation-health.json"])
    assert (health["policy_layer"], health["sdk_layer"], health["cgroup_correlation"]) == (
        "present", "self_reported", "clean")


def test_without_sdk_frames_there_is_no_policy_or_sdk_layer() -> None:
    got = members(msgspec.structs.replace(load("sdk"), sdk=[]))
    assert got["layers/policy.ndjson"] == got["layers/sdk.ndjson"] == b""
    report = json.loads(got["correlation-report.json"])
    assert report["bindings"] == []
    # The kernel's own blocks stay evidence: they do not depend on the agent's word.
    assert values(got, "file_blocked") == [FIXTURE_OUTSIDE]
