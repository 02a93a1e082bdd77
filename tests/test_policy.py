"""Policy files, presets, resolution and every decision the runner takes from them.

Pure: no root, no kernel. The CLI is driven as a user would, through
`python -m runner.cli.main policy ...`.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import msgspec
import pytest

from policy.load import PRESETS, PolicyInvalid, load_policy, load_preset, parse_policy, preset_text
from policy.model import (
    AF_INET,
    AF_INET6,
    MAX_NET_RULES,
    FilesystemSection,
    NetRule,
    Policy,
    PolicyError,
    ResolvedPolicy,
    resolve,
    split_endpoint,
)
from tests.support import assay

VARS = {"workspace": "/work/ws", "home": "/home/u", "tmpdir": "/tmp"}


def policy(text: str, **variables: str) -> ResolvedPolicy:
    return resolve(parse_policy("version = 1\n" + text, "p.toml"), **(VARS | variables))


# --- presets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_loads_resolves_and_names_itself(name: str) -> None:
    resolved = resolve(load_preset(name), **VARS)
    assert resolved.name == name
    assert resolved.allows_path("/etc/passwd", "read")
    assert resolved.allows_path("/dev/null", "write")


def test_preset_decisions() -> None:
    read_only = resolve(load_preset("read-only"), **VARS)
    assert not read_only.allows_path("/work/ws/a", "write")
    assert not read_only.allows_path("/dev/tty", "write")
    assert not read_only.allows_endpoint(AF_INET, "127.0.0.1", 80, "tcp")
    assert read_only.tool_decision("shell") == ("allow", "tools.default")

    workspace = resolve(load_preset("workspace-write"), **(VARS | {"tmpdir": "/var/tmp/u"}))
    for path in ("/work/ws/src/x.py", "/var/tmp/u/f", "/tmp/f", "/dev/null"):
        assert workspace.allows_path(path, "write"), path
    assert not workspace.allows_path("/home/u/.bashrc", "write")
    assert not workspace.allows_endpoint(AF_INET6, "::1", 53, "udp")

    full = resolve(load_preset("danger-full-access"), **VARS)
    assert full.allows_path("/etc/shadow", "write")
    assert full.allows_endpoint(AF_INET, "8.8.8.8", 53, "udp")
    assert full.net_rules_for_bpf() == []


def test_show_prints_the_preset_file_verbatim() -> None:
    proc = assay("policy", "show", "--sandbox", "workspace-write")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == preset_text("workspace-write")
    assert 'write = ["$WORKSPACE", "$TMPDIR", "/tmp", "/dev/null"]' in proc.stdout


# --- filesystem ---------------------------------------------------------------------------------


def test_path_beneath_is_by_component_not_by_prefix() -> None:
    rp = policy('[filesystem]\nread = ["/work"]\n')
    assert rp.allows_path("/work", "read")
    assert rp.allows_path("/work/a/b", "read")
    assert not rp.allows_path("/workspace", "read")
    assert not rp.allows_path("/wor", "read")
    assert rp.allows_path("/work/../work/a", "read")  # lexical normal form
    assert not rp.allows_path("/work/../etc/passwd", "read")


def test_root_covers_everything_and_write_implies_read() -> None:
    rp = policy('[filesystem]\nread = ["/"]\nwrite = ["/srv/out/"]\n')
    assert rp.allows_path("/any/thing", "read")
    assert not rp.allows_path("/any/thing", "write")
    assert rp.path_decision("/srv/out/f", "write") == ("allow", "filesystem.write[0]")
    only_write = policy('[filesystem]\nwrite = ["/srv/out"]\n')
    assert only_write.path_decision("/srv/out/f", "read") == ("allow", "filesystem.write[0]")
    assert only_write.path_decision("/srv/other", "read") == ("deny", "filesystem.read")


def test_open_denial_attributes_only_what_the_policy_refuses() -> None:
    rp = policy('[filesystem]\nread = ["/"]\nwrite = ["/work/ws"]\n')
    o_rdonly, o_wronly, o_rdwr, o_creat, o_trunc = 0, 1, 2, 0o100, 0o1000
    assert rp.open_denial("/etc/shadow", o_rdonly) is None  # an EACCES there is file modes, not policy
    assert rp.open_denial("/etc/hosts", o_wronly) == "write"
    assert rp.open_denial("/etc/hosts", o_rdwr) == "write"
    assert rp.open_denial("/etc/new", o_rdonly | o_creat) == "write"
    assert rp.open_denial("/etc/hosts", o_rdonly | o_trunc) == "write"
    assert rp.open_denial("/work/ws/out", o_wronly | o_creat) is None
    narrow = policy('[filesystem]\nread = ["/usr"]\n')
    assert narrow.open_denial("/etc/hosts", o_rdonly) == "read"


def test_variables_expand_to_normalized_absolute_paths() -> None:
    rp = policy('[filesystem]\nread = ["$HOME/.config", "${WORKSPACE}"]\nwrite = ["$TMPDIR/./agent/"]\n',
                workspace="/work/ws/", tmpdir="//tmp")
    assert rp.filesystem.read == ("/home/u/.config", "/work/ws")
    assert rp.filesystem.write == ("/tmp/agent",)
    assert rp.variables == {"WORKSPACE": "/work/ws", "HOME": "/home/u", "TMPDIR": "/tmp"}


@pytest.mark.parametrize(("entry", "problem"), [
    ("$WORK/x", 'unknown variable $WORK in "$WORK/x" (known: $WORKSPACE, $HOME, $TMPDIR)'),
    ("src", 'expected an absolute path or one starting with a variable ($WORKSPACE, $HOME, $TMPDIR), '
            'got "src"'),
    ("~/x", 'use $HOME instead of ~, got "~/x"'),
    ("/home/$USER", 'variables are only allowed at the start of a path, got "/home/$USER"'),
    ("$HOME.bak", 'expected a variable ($WORKSPACE, $HOME, $TMPDIR) followed by "/" or the end, '
                  'got "$HOME.bak"'),
    ("", "expected a path, got an empty string"),
])
def test_bad_paths_are_errors(entry: str, problem: str) -> None:
    doc = Policy(version=1, filesystem=FilesystemSection(read=("/",), write=("/ok", entry)))
    with pytest.raises(PolicyError) as err:
        resolve(doc, **VARS)
    assert str(err.value) == f"field filesystem.write[1]: {problem}"


def test_variable_values_must_be_absolute() -> None:
    with pytest.raises(ValueError, match=r"\$WORKSPACE must expand to an absolute path"):
        resolve(load_preset("workspace-write"), workspace="ws", home="/h", tmpdir="/tmp")


# --- network ------------------------------------------------------------------------------------

NET = """
[network]
default = "deny"
allow = [
  { cidr = "127.0.0.0/8", ports = "1-65535", protocol = "tcp" },
  { cidr = "::1/128", ports = "53", protocol = "udp" },
  { cidr = "10.1.0.0/16", ports = 443 },
  { cidr = "2001:db8::/32" },
  { cidr = "192.0.2.7" },
]
"""


def test_network_rules_match_family_cidr_ports_and_protocol() -> None:
    rp = policy(NET)
    assert rp.network_rule_for(AF_INET, "127.1.2.3", 8080, "tcp") == "network.allow[0]"
    assert rp.network_rule_for(AF_INET, "127.1.2.3", 8080, "udp") is None
    assert rp.network_rule_for(AF_INET, "127.0.0.1", 0, "tcp") is None  # 1-65535 excludes port 0
    assert rp.network_rule_for(AF_INET6, "::1", 53, "udp") == "network.allow[1]"
    assert rp.network_rule_for(AF_INET6, "::1", 53, 17) == "network.allow[1]"  # IPPROTO number
    assert rp.network_rule_for(AF_INET6, "::1", 54, "udp") is None
    assert rp.network_rule_for(AF_INET, "10.1.255.255", 443, "udp") == "network.allow[2]"  # any protocol
    assert rp.network_rule_for(AF_INET, "10.2.0.1", 443, "tcp") is None
    assert rp.network_rule_for(AF_INET6, "2001:db8:ffff::1", 0, 1) == "network.allow[3]"  # any port, ICMP
    assert rp.network_rule_for(AF_INET, "192.0.2.7", 22, "tcp") == "network.allow[4]"  # bare address: /32
    assert rp.network_rule_for(AF_INET, "192.0.2.8", 22, "tcp") is None


def test_ipv4_rules_cover_v4_mapped_ipv6_peers() -> None:
    rp = policy(NET)
    assert rp.network_rule_for(AF_INET6, "::ffff:127.0.0.1", 80, "tcp") == "network.allow[0]"
    assert rp.network_rule_for(AF_INET6, "::ffff:128.0.0.1", 80, "tcp") is None


def test_network_default_applies_when_no_rule_matches() -> None:
    rp = policy(NET)
    assert rp.endpoint_decision(AF_INET, "1.1.1.1", 443, "tcp") == ("deny", "network.default")
    assert rp.endpoint_decision(AF_INET, "127.0.0.1", 80, "tcp") == ("allow", "network.allow[0]")
    open_ = policy('[network]\ndefault = "allow"\n')
    assert open_.allows_endpoint(AF_INET6, "2606:4700::1", 443, "udp")
    assert policy("").allows_endpoint(AF_INET, "1.1.1.1", 443, "tcp")  # no [network]: unrestricted
    with pytest.raises(ValueError, match="not governed"):
        rp.allows_endpoint(1, "/run/x.sock", 0, "tcp")  # AF_UNIX
    with pytest.raises(ValueError, match="not an address of family"):
        rp.allows_endpoint(AF_INET, "::1", 80, "tcp")


def test_bpf_rules_are_the_evaluated_rules() -> None:
    rules = policy(NET).net_rules_for_bpf()
    assert rules[:2] == [
        NetRule(AF_INET, bytes([127]) + bytes(15), 8, 1, 65535, 6),
        NetRule(AF_INET6, bytes(10) + b"\xff\xff" + bytes([127, 0, 0, 0]), 104, 1, 65535, 6),
    ]
    assert rules[2] == NetRule(AF_INET6, ipaddress.IPv6Address("::1").packed, 128, 53, 53, 17)
    assert rules[5] == NetRule(AF_INET6, ipaddress.IPv6Address("2001:db8::").packed, 32, 0, 65535, 0)
    assert all(len(rule.address) == 16 for rule in rules)
    assert len(rules) == 8  # three IPv4 rules take two slots each


def test_rule_count_is_bounded_by_kernel_slots() -> None:
    def rules(n: int, cidr: str) -> str:
        return "\n".join(f'[[network.allow]]\ncidr = "{cidr.format(i)}"' for i in range(n))

    policy('[network]\ndefault = "deny"\n' + rules(MAX_NET_RULES, "2001:db8::{}"))
    policy('[network]\ndefault = "deny"\n' + rules(MAX_NET_RULES // 2, "10.0.0.{}"))
    with pytest.raises(PolicyInvalid, match=r"^p\.toml:4: field network\.allow: 33 rules need 66 kernel"):
        policy('[network]\ndefault = "deny"\n' + rules(MAX_NET_RULES // 2 + 1, "10.0.0.{}"))


# --- tools and decision strings -----------------------------------------------------------------


def test_tool_deny_wins_then_allow_then_default() -> None:
    rp = policy('[tools]\ndefault = "deny"\nallow = ["read_file", "shell"]\ndeny = ["shell"]\n')
    assert rp.tool_decision("shell") == ("deny", "tools.deny")
    assert rp.tool_decision("read_file") == ("allow", "tools.allow")
    assert rp.tool_decision("write_file") == ("deny", "tools.default")
    assert policy("").tool_decision("anything") == ("allow", "tools.default")


def test_split_endpoint_reads_kernel_layer_values() -> None:
    assert split_endpoint("1.2.3.4:80") == (AF_INET, "1.2.3.4", 80)
    assert split_endpoint("[::ffff:1.2.3.4]:443") == (AF_INET6, "::ffff:1.2.3.4", 443)
    with pytest.raises(ValueError):
        split_endpoint("unix:/run/x.sock")


def test_resolved_policy_round_trips_through_msgpack_and_json() -> None:
    rp = policy(NET + '[filesystem]\nread = ["/"]\nwrite = ["$WORKSPACE"]\n[tools]\ndefault = "allow"\n'
                'deny = ["shell"]\n')
    for codec in (msgspec.msgpack, msgspec.json):
        back = codec.decode(codec.encode(rp), type=ResolvedPolicy)
        assert back == rp
        assert back.net_rules_for_bpf() == rp.net_rules_for_bpf()
        assert back.allows_path("/work/ws/f", "write")


# --- malformed files: one located line each ----------------------------------------------------

MALFORMED = [
    ("wrong type", 'version = 1\n[tools]\ndefault = "allow"\nallow = "read_file"\n',
     'p.toml:4: field tools.allow: expected an array of strings, got "read_file"'),
    ("unknown key", 'version = 1\n\n[network]\ndefault = "deny"\nalow = []\n',
     "p.toml:5: field network.alow: unknown key (expected one of: default, allow)"),
    ("unknown top-level key", 'version = 1\nnmae = "x"\n',
     "p.toml:2: field nmae: unknown key "
     "(expected one of: version, name, description, filesystem, network, tools)"),
    ("bad CIDR", 'version = 1\n[network]\ndefault = "deny"\nallow = [\n  { cidr = "127.0.0.0/8" },\n'
                 '  { cidr = "10.0.0.300/8", ports = "443" },\n]\n',
     'p.toml:6: field network.allow[1].cidr: expected an IPv4 or IPv6 address or CIDR such as '
     '"10.0.0.0/8" or "::1/128", got "10.0.0.300/8"'),
    ("host bits", 'version = 1\n[network]\ndefault = "deny"\n[[network.allow]]\ncidr = "::1/128"\n'
                  '[[network.allow]]\ncidr = "10.1.2.3/8"\n',
     'p.toml:7: field network.allow[1].cidr: "10.1.2.3/8" has host bits set; did you mean "10.0.0.0/8"?'),
    ("bad port range", 'version = 1\n[network]\ndefault = "deny"\nallow = [ { cidr = "127.0.0.0/8" },\n'
                       '  { cidr = "::1", ports = "0-99999", protocol = "tcp" } ]\n',
     'p.toml:5: field network.allow[1].ports: expected "N" or "N-M" with 1 <= N <= M <= 65535, '
     'got "0-99999"'),
    ("reversed ports", 'version = 1\n[network]\ndefault = "deny"\n[[network.allow]]\ncidr = "::/0"\n'
                       'ports = "90-80"\n',
     'p.toml:6: field network.allow[0].ports: expected "N" or "N-M" with 1 <= N <= M <= 65535, '
     'got "90-80"'),
    ("bad protocol", 'version = 1\n[network]\ndefault = "deny"\n\n[[network.allow]]\ncidr = "::1"\n'
                     'protocol = "icmp"\n',
     'p.toml:7: field network.allow[0].protocol: expected "any", "tcp" or "udp", got "icmp"'),
    ("bad default", 'version = 1\nnetwork.default = "maybe"\n',
     'p.toml:2: field network.default: expected "allow" or "deny", got "maybe"'),
    ("missing key", 'version = 1\n[tools]\nallow = []\n',
     'p.toml:2: field tools.default: missing (expected "allow" or "deny")'),
    ("bad version", "version = 2\n", "p.toml:1: field version: expected 1, got 2"),
    ("unknown variable", 'version = 1\n[filesystem]\nread = ["/"]\nwrite = [\n  "$WORKSPACE",\n'
                         '  "$WORK/out",\n]\n',
     'p.toml:6: field filesystem.write[1]: unknown variable $WORK in "$WORK/out" '
     "(known: $WORKSPACE, $HOME, $TMPDIR)"),
    ("TOML syntax error", 'version = 1\n[tools]\ndefault = allow\n',
     "p.toml:3: invalid TOML: invalid value (column 11)"),
    ("unterminated string", 'version = 1\n[tools]\ndefault = "allow',
     "p.toml:3: invalid TOML: unterminated string (at end of file)"),
]


@pytest.mark.parametrize(("text", "line"), [case[1:] for case in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_policy_gives_one_located_line(text: str, line: str) -> None:
    with pytest.raises(PolicyInvalid) as err:
        parse_policy(text, "p.toml")
    assert str(err.value) == line


def test_not_utf8_is_invalid_with_a_line(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_bytes(b'version = 1\ndescription = "\xff"\n')
    with pytest.raises(PolicyInvalid, match=r"p\.toml:2: invalid TOML: not UTF-8"):
        load_policy(path)


def test_file_name_is_the_default_policy_name(tmp_path: Path) -> None:
    path = tmp_path / "ci-agent.toml"
    path.write_text("version = 1\n")
    assert load_policy(path).name == "ci-agent"


# --- CLI ----------------------------------------------------------------------------------------


def test_check_explains_a_valid_policy(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('version = 1\n[filesystem]\nread = ["/usr"]\nwrite = ["$WORKSPACE"]\n' + NET
                    + '[tools]\ndefault = "allow"\ndeny = ["shell"]\n')
    proc = assay("policy", "check", path, "--workspace", tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"OK {path}: policy 'agent' (version 1) is valid" in out
    assert f"  writable (and readable): {tmp_path}  [filesystem.write[0]] (from $WORKSPACE)" in out
    assert "  readable: /usr  [filesystem.read[0]]" in out
    assert "default deny" in out
    assert "  reachable: ::1/128 port 53 udp  [network.allow[1]]" in out
    assert "  denied: shell  [tools.deny]" in out
    assert "  any other tool: allow  [tools.default]" in out


@pytest.mark.parametrize("name", PRESETS)
def test_check_accepts_each_preset(name: str) -> None:
    proc = assay("policy", "check", "--sandbox", name)
    assert proc.returncode == 0, proc.stderr
    assert f"policy '{name}'" in proc.stdout


def test_check_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n[network]\ndefault = "deny"\nallow = [{ cidr = "::1", ports = "0-99999" }]')
    proc = assay("policy", "check", bad)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip() == (
        f'assay-runner: error: {bad}:4: field network.allow[0].ports: expected "N" or "N-M" '
        'with 1 <= N <= M <= 65535, got "0-99999"')
    proc = assay("policy", "check", tmp_path / "missing.toml")
    assert proc.returncode == 2
    assert "cannot read policy file" in proc.stderr
    assert assay("policy", "check", tmp_path).returncode == 2  # a directory
    assert assay("policy", "check").returncode == 2  # neither FILE nor --sandbox
