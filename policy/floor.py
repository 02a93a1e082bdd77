"""The operator's floor policy, and what "tighten" means for a caller's policy.

A daemon operator may set a floor: a policy every run obeys whatever its
caller asks. Callers may tighten it, never loosen it. Precisely, over the
decisions a `ResolvedPolicy` makes (policy/model.py):

- a file access (path, read|write) is allowed by `meet(F, C)` iff both F and
  C allow it (`path_decision`);
- an IP endpoint (family, address, port, protocol) is allowed iff both allow
  it (`endpoint_decision`);
- a tool is allowed iff both allow it (`tool_decision`).

So the effective policy `meet(F, C)` allows a subset of what F allows, for
every caller policy C (nothing can loosen the floor), and exactly what F
allows when C allows everything (no caller policy, or danger-full-access).
The result is an ordinary `ResolvedPolicy`, built from the rule shapes the
kernel enforces (Landlock trees, first-match network rules, tool lists), so
enforcement and the normalizer's re-evaluation need nothing new.
"""

from __future__ import annotations

import ipaddress

from policy.model import (
    MAX_NET_RULES,
    Decision,
    PolicyError,
    ResolvedFilesystem,
    ResolvedNetRule,
    ResolvedNetwork,
    ResolvedPolicy,
    ResolvedTools,
    beneath,
    kernel_rule_slots,
)


def meet(floor: ResolvedPolicy, caller: ResolvedPolicy | None) -> ResolvedPolicy:
    """The policy allowing exactly what both `floor` and `caller` allow."""
    if caller is None:
        return floor
    return ResolvedPolicy(
        name=f"{caller.name}+floor:{floor.name}" if caller.name else f"floor:{floor.name}",
        description=caller.description,
        variables=caller.variables,
        filesystem=_meet_filesystem(floor.filesystem, caller.filesystem),
        network=_meet_network(floor.network, caller.network),
        tools=_meet_tools(floor.tools, caller.tools),
    )


# --- files: unions of path-beneath trees -------------------------------------------------------


def _intersect_trees(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """Trees covering exactly the paths beneath some tree of `a` and some tree of `b`.

    Two trees overlap only when one contains the other, and then their
    intersection is the inner one; so the intersection of two unions is the
    set of those inner trees.
    """
    inner = {x for x in a if any(beneath(x, y) for y in b)} | {y for y in b if any(beneath(y, x) for x in a)}
    return tuple(sorted(inner))


def _meet_filesystem(f: ResolvedFilesystem, c: ResolvedFilesystem) -> ResolvedFilesystem:
    """Write needs both writes; read needs both reads (a write tree grants read too)."""
    write = _intersect_trees(f.write, c.write)
    read = _intersect_trees(f.read + f.write, c.read + c.write)
    return ResolvedFilesystem(read=tuple(t for t in read if not any(beneath(t, w) for w in write)),
                              write=write)


# --- network: first-match allow rules, then a default -------------------------------------------


def _meet_network(f: ResolvedNetwork, c: ResolvedNetwork) -> ResolvedNetwork:
    """Default allow admits everything (its rules are informational), so it is the neutral side."""
    if f.default == "allow":
        return c
    if c.default == "allow":
        return f
    rules = [r for a in f.allow for b in c.allow if (r := _meet_rule(a, b)) is not None]
    rules = [ResolvedNetRule(rule=f"network.allow[{i}]", cidr=r.cidr, ports=r.ports, protocol=r.protocol)
             for i, r in enumerate(dict.fromkeys(rules))]
    network = ResolvedNetwork(default="deny", allow=tuple(rules))
    slots = kernel_rule_slots(network)
    if slots > MAX_NET_RULES:
        raise PolicyError(("network", "allow"), f"with the floor policy the network rules need {slots} "
                          f"kernel rule slots, more than {MAX_NET_RULES}: use fewer, wider rules")
    return network


def _meet_rule(a: ResolvedNetRule, b: ResolvedNetRule) -> ResolvedNetRule | None:
    """The endpoints both rules match, as one rule, or None when they share none.

    An IPv4 rule also matches its v4-mapped IPv6 twins (policy/model.py), so
    an IPv4 and an IPv6 rule share only IPv6 endpoints: those are compared,
    and the result is an IPv6 rule.
    """
    net_a, net_b = ipaddress.ip_network(a.cidr), ipaddress.ip_network(b.cidr)
    if net_a.version != net_b.version:
        net_a, net_b = _v6(net_a), _v6(net_b)
    if net_a.subnet_of(net_b):  # type: ignore[arg-type]  # same version here
        inner = net_a
    elif net_b.subnet_of(net_a):  # type: ignore[arg-type]  # same version here
        inner = net_b
    else:
        return None
    lo, hi = max(a.ports[0], b.ports[0]), min(a.ports[1], b.ports[1])
    if lo > hi or "any" != a.protocol != b.protocol != "any":
        return None
    protocol = a.protocol if a.protocol != "any" else b.protocol
    return ResolvedNetRule(rule="", cidr=str(inner), ports=(lo, hi), protocol=protocol)


def _v6(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ipaddress.IPv6Network:
    """An IPv4 range as its v4-mapped IPv6 range (an IPv6 range unchanged)."""
    if isinstance(net, ipaddress.IPv6Network):
        return net
    mapped = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + net.network_address.packed)
    return ipaddress.IPv6Network(f"{mapped}/{96 + net.prefixlen}")


# --- tools: deny list, allow list, default ------------------------------------------------------


def _meet_tools(f: ResolvedTools, c: ResolvedTools) -> ResolvedTools:
    """Deny what either denies; default allow only when both default to allow.

    With a deny default, the allow list keeps every listed tool both allow.
    """
    deny = tuple(sorted(set(f.deny) | set(c.deny)))
    default: Decision = "allow" if f.default == c.default == "allow" else "deny"
    listed = set(f.allow) | set(c.allow)
    allow = tuple(sorted(t for t in listed if f.decision(t)[0] == c.decision(t)[0] == "allow"))
    return ResolvedTools(default=default, allow=allow, deny=deny)
