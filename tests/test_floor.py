"""The floor policy: a caller's policy can tighten it, never loosen it (policy/floor.py).

Random floor and caller policies over a small universe of trees, networks,
ports and tools; every probe must be allowed by the meet exactly when both
allow it. Exactness both ways: nothing the floor denies gets through, and
nothing both allow is lost.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from policy.floor import meet
from policy.model import AF_INET, AF_INET6, Policy, ResolvedPolicy, resolve

TREES = ["/", "/a", "/a/b", "/a/c", "/d", "/d/e/f"]
PATHS = ["/", "/a", "/a/b/x", "/a/c", "/a/bx", "/d/e", "/d/e/f/g", "/z"]
CIDRS = ["10.0.0.0/8", "10.1.0.0/16", "192.168.1.0/24", "0.0.0.0/0", "::1/128", "::ffff:a00:0/104",
         "::/0", "2001:db8::/32"]
PORTS = [None, "80", "1-1024", "443", "8000-9000"]
ENDPOINTS = [(AF_INET, "10.1.2.3"), (AF_INET, "10.2.0.1"), (AF_INET, "192.168.1.7"), (AF_INET, "8.8.8.8"),
             (AF_INET6, "::1"), (AF_INET6, "::ffff:10.1.2.3"), (AF_INET6, "::ffff:8.8.8.8"),
             (AF_INET6, "2001:db8::5"), (AF_INET6, "2001:db9::5")]
TOOLS = ["read", "write", "shell", "web"]


def _random_policy(rng: random.Random, name: str) -> ResolvedPolicy:
    doc: dict = {"version": 1, "name": name}
    if rng.random() < 0.8:
        doc["filesystem"] = {"read": rng.sample(TREES, rng.randint(0, 3)),
                             "write": rng.sample(TREES, rng.randint(0, 2))}
    if rng.random() < 0.8:
        rules = []
        for _ in range(rng.randint(0, 4)):
            rule = {"cidr": rng.choice(CIDRS), "protocol": rng.choice(["tcp", "udp", "any"])}
            if (ports := rng.choice(PORTS)) is not None:
                rule["ports"] = ports
            rules.append(rule)
        doc["network"] = {"default": rng.choice(["allow", "deny"]), "allow": rules}
    if rng.random() < 0.8:
        doc["tools"] = {"default": rng.choice(["allow", "deny"]),
                        "allow": rng.sample(TOOLS, rng.randint(0, 3)),
                        "deny": rng.sample(TOOLS, rng.randint(0, 2))}


    return resolve(msgspec.convert(doc, Policy), workspace="/w", home="/h", tmpdir="/tmp")


def _decisions(policy: ResolvedPolicy) -> dict[tuple, bool]:
    out: dict[tuple, bool] = {}
    for path in PATHS:
        for access in ("read", "write"):
            out[("file", path, access)] = policy.allows_path(path, access)
    for family, address in ENDPOINTS:
        for port in (53, 80, 443, 8080, 65535):
            for proto in ("tcp", "udp"):
                allowed = policy.allows_endpoint(family, address, port, proto)
                out[("net", family, address, port, proto)] = allowed
    for tool in [*TOOLS, "other"]:
        out[("tool", tool)] = policy.tool_decision(tool)[0] == "allow"
    return out


@pytest.mark.parametrize("seed", range(300))
def test_meet_allows_exactly_what_both_allow(seed: int) -> None:
    rng = random.Random(seed)
    floor, caller = _random_policy(rng, "floor"), _random_policy(rng, "mine")
    effective = meet(floor, caller)
    f, c, e = _decisions(floor), _decisions(caller), _decisions(effective)
    loosened = [k for k in e if e[k] and not f[k]]
    assert not loosened, f"the caller loosened the floor at {loosened[:3]}"
    lost = [k for k in e if f[k] and c[k] and not e[k]]
    assert not lost, f"allowed by both but denied by the meet at {lost[:3]}"


def test_a_caller_cannot_loosen_a_floor_by_allowing_everything() -> None:
    rng = random.Random(7)
    floor = _random_policy(rng, "floor")


    everything = resolve(msgspec.convert({"version": 1, "name": "all"}, Policy), "/w", "/h", "/tmp")
    assert _decisions(meet(floor, everything)) == _decisions(floor)
    assert meet(floor, None) == floor


def test_effective_policy_names_both() -> None:
    rng = random.Random(3)
    assert meet(_random_policy(rng, "base"), _random_policy(rng, "mine")).name == "mine+floor:base"
