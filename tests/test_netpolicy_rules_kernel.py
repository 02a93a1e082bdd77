"""The kernel's network verdicts agree with the policy model's, case by case.

The BPF program (ebpf/netpolicy.c) folds every field of a rule into one
value per rule, so that older verifiers accept it; this checks that folding
against `ResolvedPolicy.allows_endpoint` (policy/model.py), the reference
every other part of the product uses, on the edges where a matcher goes
wrong: each end of a port range and one past it, the other protocol, a
rule for any protocol, the first and last address of a CIDR and the
addresses just outside it, IPv4 and IPv6, connect() and sendto().

A kernel without Landlock (Debian 11's 5.10) refuses the run instead: a
policy also keeps the command out of the cgroup filesystem, through
Landlock, and the runner fails closed rather than run it unconfined.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import socket
from pathlib import Path

from policy.load import load_policy
from policy.model import ResolvedPolicy, resolve
from runner.host.checks import landlock_abi
from tests.support import ROOT, Archive, assay

PY = "/usr/bin/python3"

POLICY = """\
version = 1
[network]
default = "deny"
allow = [
  { cidr = "10.20.30.0/24", ports = "1000-1010", protocol = "udp" },
  { cidr = "127.0.0.1", ports = 7000, protocol = "tcp" },
  { cidr = "192.0.2.128/25", ports = "20-21" },
  { cidr = "fd00:1:2:3::/64", ports = "443-444", protocol = "tcp" },
  { cidr = "::1", ports = 9000 },
]
"""


def _cases(policy: ResolvedPolicy) -> list[tuple[int, str, int, str, str]]:
    """Each allow rule's edges, for both protocols and both ways of sending."""
    cases = []
    for rule in policy.network.allow:
        net = ipaddress.ip_network(rule.cidr)
        family = int(socket.AF_INET if net.version == 4 else socket.AF_INET6)
        (lo, hi), addresses = rule.ports, {net[0], net[-1], net[0] - 1, net[-1] + 1}
        for address in sorted(addresses):
            for port in sorted({lo - 1, lo, hi, hi + 1}):
                for protocol in ("tcp", "udp"):
                    for via in ("connect", "sendto") if protocol == "udp" else ("connect",):
                        cases.append((family, str(address), port, protocol, via))
    return cases


def test_every_edge_case_gets_the_verdict_the_policy_model_gives(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text(POLICY)
    policy = resolve(load_policy(tmp_path / "policy.toml"), workspace=str(tmp_path), home="/root",
                     tmpdir="/tmp")
    cases = _cases(policy)
    program = ROOT / "tests/programs/policy/net_cases.py"
    proc = assay("run", "--out", tmp_path, "--run-id", "netcases", "--workdir", tmp_path,
                 "--policy", tmp_path / "policy.toml", "--net", "isolated",
                 "--", PY, "-B", program, json.dumps(cases), cwd=tmp_path)
    if landlock_abi() is None:  # Debian 11's 5.10: a policy also keeps the command out of the cgroup fs
        assert proc.returncode == 125 and "the policy needs Landlock" in proc.stderr, proc.stderr
        return  # refused, fail closed: no verdicts to compare
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    kernel = [code != errno.EPERM for code in got]
    model = [policy.allows_endpoint(family, address, port, protocol)
             for family, address, port, protocol, _ in cases]
    wrong = [(case, code) for case, code, k, m in zip(cases, got, kernel, model, strict=True) if k != m]
    assert wrong == []
    blocked = Archive(tmp_path / "netcases.tar.gz").values("connect_blocked")
    assert len(blocked) == len(model) - sum(model)  # each refusal is one evidence line
    assert 20 <= sum(model) <= len(model) - 100  # both verdicts, many of each: the check can fail
