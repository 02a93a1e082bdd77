"""Policy documents, their resolved form, and every decision taken from them.

Pure: no I/O, no host lookups. The runner resolves a policy once, stores the
`ResolvedPolicy` in the raw spool header, and the offline normalizer
re-evaluates that stored value, so a run and its re-normalization decide
identically. Evaluation mirrors the kernel-side enforcement:

- files: Landlock path-beneath rules (a tree grants everything beneath it);
  here applied to lexical absolute paths, the form the kernel layer records;
- network: the cgroup sock_addr programs' first-match over `NetRule`s, which
  `network_rule_for` evaluates from the very list handed to the kernel;
- tools: the runner's answer on the SDK channel.

Numbers are Linux's (AF_INET 2, AF_INET6 10, IPPROTO_TCP 6, IPPROTO_UDP 17)
whatever platform re-normalizes, because they come from Linux kernel records.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Iterator
from typing import Literal

import msgspec

AF_INET = 2
AF_INET6 = 10
MAX_NET_RULES = 64
"""Kernel rule slots (the BPF rule array); each IPv4 rule takes two (see `net_rules_for_bpf`)."""

Access = Literal["read", "write"]
Decision = Literal["allow", "deny"]
Protocol = Literal["tcp", "udp", "any"]
Loc = tuple[str | int, ...]

VARIABLES = ("WORKSPACE", "HOME", "TMPDIR")
PROTOCOL_NUMBERS: dict[str, int] = {"any": 0, "tcp": 6, "udp": 17}
ALL_PORTS = (0, 65535)

_O_ACCMODE = 0o3
_O_RDONLY = 0
_WRITE_INTENT = 0o100 | 0o1000 | 0o20000000  # O_CREAT, O_TRUNC, __O_TMPFILE
_V4_MAPPED = bytes(10) + b"\xff\xff"
_PORTS = re.compile(r"(\d{1,5})(?:-(\d{1,5}))?", re.ASCII)
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))(?=/|$)")


class PolicyError(ValueError):
    """A policy field that cannot be used; `loc` locates it in the document (`network.allow[1].ports`)."""

    def __init__(self, loc: Loc, problem: str) -> None:
        super().__init__(f"field {format_loc(loc)}: {problem}")
        self.loc = loc
        self.problem = problem


def format_loc(loc: Loc) -> str:
    """`("network", "allow", 1, "ports")` as `network.allow[1].ports`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


def _quote(value: object) -> str:
    """A value as it would be written in TOML, for error messages."""
    return msgspec.json.encode(value).decode() if isinstance(value, str) else str(value)


# --- the document, as written -------------------------------------------------------------------


class _Document(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Strict: a misspelt key is an error, never a silently ignored rule.

    Subclasses repeat `frozen=True`: msgspec inherits it, a type checker does not know that.
    """


class FilesystemSection(_Document, frozen=True):
    """Trees (recursive) the command may read, and may write (write implies read).

    Anything not beneath one of them is denied. Entries are absolute paths or
    start with `$WORKSPACE`, `$HOME` or `$TMPDIR`.
    """

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()


class NetworkRuleSpec(_Document, frozen=True):
    """One allow rule: a CIDR (or a bare address), ports `"N"`/`"N-M"`/N, a protocol.

    Omitted `ports` means every port (0 included); omitted `protocol` means any.
    """

    cidr: str
    ports: int | str | None = None
    protocol: Protocol = "any"


class NetworkSection(_Document, frozen=True):
    """IPv4/IPv6 endpoints: `allow` rules, then `default` for everything else."""

    default: Decision
    allow: tuple[NetworkRuleSpec, ...] = ()


class ToolsSection(_Document, frozen=True):
    """Tool names the agent asks about on the SDK channel: deny wins, then allow, then default."""

    default: Decision
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


class Policy(_Document, frozen=True):
    """A policy file as decoded. An omitted section does not restrict that area."""

    version: Literal[1]
    name: str = ""
    description: str = ""
    filesystem: FilesystemSection | None = None
    network: NetworkSection | None = None
    tools: ToolsSection | None = None


# --- the resolved form ------------------------------------------------------------------------


class NetRule(msgspec.Struct, frozen=True):
    """One kernel rule slot, in the BPF program's terms (ebpf/netpolicy.c).

    `address` is 16 bytes in network order, masked to `prefixlen`; an IPv4
    address fills the first 4 bytes (the program compares `user_ip4` there).
    Ports are host order, inclusive; `protocol` 0 matches any.
    """

    family: int
    address: bytes
    prefixlen: int
    port_lo: int
    port_hi: int
    protocol: int

    def matches(self, family: int, address: bytes, port: int, protocol: int) -> bool:
        """Whether the program's `rule_misses` is zero, for a 16-byte address laid out the same way."""
        if self.family != family or (self.protocol and self.protocol != protocol):
            return False
        if not self.port_lo <= port <= self.port_hi:
            return False
        bits = len(address) * 8
        mask = ((1 << self.prefixlen) - 1) << (bits - self.prefixlen)
        return int.from_bytes(address, "big") & mask == int.from_bytes(self.address, "big")


class ResolvedFilesystem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Absolute, lexically normalized trees, in document order (indices name rules)."""

    read: tuple[str, ...]
    write: tuple[str, ...]


class ResolvedNetRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A validated allow rule; `rule` is where it came from (`network.allow[0]`)."""

    rule: str
    cidr: str
    ports: tuple[int, int]
    protocol: Protocol


class ResolvedNetwork(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    default: Decision
    allow: tuple[ResolvedNetRule, ...]


class ResolvedTools(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    default: Decision
    allow: tuple[str, ...]
    deny: tuple[str, ...]

    def decision(self, name: str) -> tuple[Decision, str]:
        """Deny list first (deny wins), then allow list, then the default; with the deciding rule."""
        if name in self.deny:
            return "deny", "tools.deny"
        if name in self.allow:
            return "allow", "tools.allow"
        return self.default, "tools.default"


class ResolvedPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A policy with variables expanded and rules parsed: what the run enforces.

    Serializable with msgspec (JSON and msgpack) so it can travel in the raw
    spool header; every method is a pure function of the stored fields.
    """

    name: str
    description: str
    variables: dict[str, str]
    """The values `$WORKSPACE`, `$HOME`, `$TMPDIR` expanded to (provenance for reviewers)."""
    filesystem: ResolvedFilesystem
    network: ResolvedNetwork
    tools: ResolvedTools

    # files

    def path_decision(self, path: str, access: Access) -> tuple[Decision, str]:
        """Allow with the granting rule (`filesystem.write[0]`), or deny naming the list that lacks it.

        Path-beneath on lexical absolute paths: `/work` covers `/work/a`, not
        `/workspace`; `/` covers everything. Write implies read.
        """
        target = normalize_path(path)
        lists = (("write", self.filesystem.write),) if access == "write" else (
            ("read", self.filesystem.read), ("write", self.filesystem.write))
        for list_name, trees in lists:
            for i, tree in enumerate(trees):
                if beneath(target, tree):
                    return "allow", f"filesystem.{list_name}[{i}]"
        return "deny", f"filesystem.{access}"

    def allows_path(self, path: str, access: Access) -> bool:
        return self.path_decision(path, access)[0] == "allow"

    def open_denial(self, path: str, flags: int) -> Access | None:
        """Which access the policy refuses to an open with these flags, or None if it allows it.

        A failed open is a policy block only when this is not None: an EACCES
        the policy did not cause (file modes, another LSM) is not attributed
        to it. Writing intent is the access mode or O_CREAT/O_TRUNC/O_TMPFILE
        (Landlock checks create and truncate as write rights).
        """
        wants_write = flags & _O_ACCMODE != _O_RDONLY or bool(flags & _WRITE_INTENT)
        if wants_write and not self.allows_path(path, "write"):
            return "write"
        if not self.allows_path(path, "read"):
            return "read"
        return None

    # network

    def net_rules_for_bpf(self) -> list[NetRule]:
        """The kernel rule list, in match order; at most `MAX_NET_RULES` (checked by `resolve`)."""
        return [rule for _, rule in _kernel_rules(self.network)]

    def network_rule_for(self, endpoint_family: int, address: str, port: int,
                         protocol: str | int) -> str | None:
        """The first allow rule matching the endpoint (`network.allow[1]`), or None.

        `address` is an IP literal of `endpoint_family` (AF_INET or AF_INET6;
        other families, e.g. unix sockets, are not governed and raise
        ValueError). `protocol` is "tcp", "udp" or an IPPROTO number (as the
        BPF program reports it); a rule with protocol "any" matches all.
        """
        packed = _packed_endpoint(endpoint_family, address)
        number = protocol if isinstance(protocol, int) else _protocol_number(protocol)
        for origin, rule in _kernel_rules(self.network):
            if rule.matches(endpoint_family, packed, port, number):
                return origin
        return None

    def endpoint_decision(self, endpoint_family: int, address: str, port: int,
                          protocol: str | int) -> tuple[Decision, str]:
        """Allow by a rule, else the section default (`network.default`)."""
        origin = self.network_rule_for(endpoint_family, address, port, protocol)
        return ("allow", origin) if origin else (self.network.default, "network.default")

    def allows_endpoint(self, endpoint_family: int, address: str, port: int, protocol: str | int) -> bool:
        return self.endpoint_decision(endpoint_family, address, port, protocol)[0] == "allow"

    # tools

    def tool_decision(self, name: str) -> tuple[Decision, str]:
        """The tools section's decision (`ResolvedTools.decision`)."""
        return self.tools.decision(name)


def split_endpoint(endpoint: str) -> tuple[int, str, int]:
    """`1.2.3.4:80` / `[::1]:80` (kernel layer values) as (family, address, port)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not an IP endpoint: {endpoint!r}")
    if host.startswith("[") and host.endswith("]"):
        return AF_INET6, host[1:-1], int(port)
    return AF_INET, host, int(port)


# --- resolution --------------------------------------------------------------------------------


def normalize_path(path: str) -> str:
    """Lexical normal form of an absolute path, exactly as the normalizer spells kernel values."""
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    return posixpath.normpath(path).replace("//", "/", 1)


def expand_path(template: str, variables: dict[str, str], loc: Loc = ()) -> str:
    """`$WORKSPACE/sub` (or `${WORKSPACE}/sub`) expanded and normalized; errors name `loc`.

    A variable may only lead the path (a `$` elsewhere is most likely an
    unexpanded shell variable, not a file name), and the result must be absolute.
    """
    known = ", ".join(f"${name}" for name in VARIABLES)
    if not template:
        raise PolicyError(loc, "expected a path, got an empty string")
    if "\0" in template:
        raise PolicyError(loc, "a path cannot contain a NUL byte")
    match = _VARIABLE.match(template)
    rest = template[match.end():] if match else template
    if template.startswith("$") and not match:
        raise PolicyError(loc, f'expected a variable ({known}) followed by "/" or the end, '
                               f"got {_quote(template)}")
    if "$" in rest:
        raise PolicyError(loc, f"variables are only allowed at the start of a path, got {_quote(template)}")
    if match:
        name = match[1] or match[2]
        if name not in variables:
            raise PolicyError(loc, f"unknown variable ${name} in {_quote(template)} (known: {known})")
        template = variables[name] + rest
    if template.startswith("~"):
        raise PolicyError(loc, f"use $HOME instead of ~, got {_quote(template)}")
    if not template.startswith("/"):
        raise PolicyError(loc, f"expected an absolute path or one starting with a variable ({known}), "
                               f"got {_quote(template)}")
    return normalize_path(template)


def _kernel_rules(network: ResolvedNetwork) -> Iterator[tuple[str, NetRule]]:
    """Each kernel rule with its origin, in match order.

    An IPv4 rule also yields its v4-mapped IPv6 twin (`::ffff:a.b.c.d`):
    dual-stack sockets (Java, some resolvers) reach IPv4 peers through the
    connect6/sendmsg6 hooks, and the rule's author meant those peers too.
    """
    for spec in network.allow:
        net = ipaddress.ip_network(spec.cidr)
        lo, hi = spec.ports
        proto = PROTOCOL_NUMBERS[spec.protocol]
        if net.version == 4:
            v4 = net.network_address.packed
            yield spec.rule, NetRule(AF_INET, v4 + bytes(12), net.prefixlen, lo, hi, proto)
            yield spec.rule, NetRule(AF_INET6, _V4_MAPPED + v4, 96 + net.prefixlen, lo, hi, proto)
        else:
            yield spec.rule, NetRule(AF_INET6, net.network_address.packed, net.prefixlen, lo, hi, proto)


def kernel_rule_slots(network: ResolvedNetwork) -> int:
    """How many kernel rule slots `network`'s allow rules take (at most `MAX_NET_RULES`)."""
    return sum(1 for _ in _kernel_rules(network))


def beneath(path: str, tree: str) -> bool:
    """Landlock's path-beneath on lexical paths: `/work` covers `/work/a`, not `/workspace`."""
    return tree == "/" or path == tree or path.startswith(tree + "/")


def _protocol_number(name: str) -> int:
    if name not in ("tcp", "udp"):
        raise ValueError(f'protocol must be "tcp", "udp" or an IPPROTO number, got {name!r}')
    return PROTOCOL_NUMBERS[name]


def _packed_endpoint(family: int, address: str) -> bytes:
    """16 bytes laid out as the BPF program sees the address (IPv4 in the first four)."""
    if family not in (AF_INET, AF_INET6):
        raise ValueError(f"address family {family} is not governed by the network policy")
    ip = ipaddress.ip_address(address)
    if (ip.version == 4) != (family == AF_INET):
        raise ValueError(f"{address} is not an address of family {family}")
    return ip.packed.ljust(16, b"\0")


def _parse_ports(value: int | str | None, loc: Loc) -> tuple[int, int]:
    if value is None:
        return ALL_PORTS
    match = _PORTS.fullmatch(str(value))
    lo = int(match[1]) if match else 0
    hi = int(match[2] or match[1]) if match else 0
    if not 1 <= lo <= hi <= 65535:
        raise PolicyError(loc, f'expected "N" or "N-M" with 1 <= N <= M <= 65535, got {_quote(value)}')
    return lo, hi


def _parse_cidr(text: str, loc: Loc) -> str:
    """Canonical CIDR text; host bits set is an error (a /8 written as 10.1.2.3/8 is likely a typo)."""
    try:
        return str(ipaddress.ip_network(text, strict=True))
    except ValueError:
        pass
    try:
        loose = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise PolicyError(loc, 'expected an IPv4 or IPv6 address or CIDR such as "10.0.0.0/8" or "::1/128", '
                               f"got {_quote(text)}") from None
    raise PolicyError(loc, f'{_quote(text)} has host bits set; did you mean "{loose}"?')


def _resolve_filesystem(section: FilesystemSection | None, variables: dict[str, str]) -> ResolvedFilesystem:
    if section is None:
        return ResolvedFilesystem(read=("/",), write=("/",))
    def trees(name: str, templates: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(expand_path(t, variables, ("filesystem", name, i)) for i, t in enumerate(templates))

    return ResolvedFilesystem(read=trees("read", section.read), write=trees("write", section.write))


def _resolve_network(section: NetworkSection | None) -> ResolvedNetwork:
    if section is None:
        return ResolvedNetwork(default="allow", allow=())
    rules = tuple(
        ResolvedNetRule(
            rule=f"network.allow[{i}]",
            cidr=_parse_cidr(spec.cidr, ("network", "allow", i, "cidr")),
            ports=_parse_ports(spec.ports, ("network", "allow", i, "ports")),
            protocol=spec.protocol,
        )
        for i, spec in enumerate(section.allow)
    )
    network = ResolvedNetwork(default=section.default, allow=rules)
    slots = kernel_rule_slots(network)
    if slots > MAX_NET_RULES:
        raise PolicyError(("network", "allow"), f"{len(rules)} rules need {slots} kernel rule slots "
                          f"(an IPv4 rule also covers v4-mapped IPv6, taking two); at most {MAX_NET_RULES}")
    return network


def _resolve_tools(section: ToolsSection | None) -> ResolvedTools:
    if section is None:
        return ResolvedTools(default="allow", allow=(), deny=())
    for list_name in ("allow", "deny"):
        for i, name in enumerate(getattr(section, list_name)):
            if not name or name != name.strip():
                raise PolicyError(("tools", list_name, i),
                                  f"expected a tool name without surrounding spaces, got {_quote(name)}")
    return ResolvedTools(default=section.default, allow=section.allow, deny=section.deny)


def resolve(policy: Policy, workspace: str, home: str, tmpdir: str) -> ResolvedPolicy:
    """Expand variables, normalize paths and parse rules; PolicyError names the bad field.

    The three values must be absolute (ValueError otherwise: they come from the
    runner, not from the policy file).
    """
    variables = {"WORKSPACE": workspace, "HOME": home, "TMPDIR": tmpdir}
    for name, value in variables.items():
        if not value.startswith("/"):
            raise ValueError(f"${name} must expand to an absolute path, got {value!r}")
    variables = {name: normalize_path(value) for name, value in variables.items()}
    return ResolvedPolicy(
        name=policy.name,
        description=policy.description,
        variables=variables,
        filesystem=_resolve_filesystem(policy.filesystem, variables),
        network=_resolve_network(policy.network),
        tools=_resolve_tools(policy.tools),
    )


def validate_policy(policy: Policy) -> None:
    """Every check `resolve` makes, without a host: variables stand in as fixed absolute paths.

    Equivalent to resolving for real, because only the variables' values
    differ and `resolve` requires them absolute.
    """
    resolve(policy, workspace="/workspace", home="/home/user", tmpdir="/tmp")
