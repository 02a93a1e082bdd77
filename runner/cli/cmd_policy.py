"""`assay-runner policy`: check and explain a policy, or print a shipped preset.

`policy check FILE` (or `--sandbox NAME`) validates the policy and says in
plain lines what the command will be able to read, write and reach, and which
tools it may call, resolved for this host (`--workspace`, default the current
directory; $HOME and $TMPDIR from the environment). Exit 0 when valid, 1 when
invalid (one line: `FILE:LINE: field PATH: problem`), 2 when the file cannot
be read. `policy show --sandbox NAME` prints a preset's TOML, a starting
point for your own policy. Format: docs/policy.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from policy.load import (
    PRESETS,
    PolicyInvalid,
    PolicyUnreadable,
    host_variables,
    load_policy,
    load_preset,
    preset_text,
)
from policy.model import ALL_PORTS, Policy, ResolvedPolicy, expand_path, resolve
from runner.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, RunnerError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `policy` subcommand and its `check` and `show` actions."""
    parser = subparsers.add_parser(
        "policy", help="check and explain a policy file, or print a built-in sandbox preset",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="policy_action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="validate a policy and explain what it allows",
                               description="Validate a policy and explain what it allows on this host.")
    source = check.add_mutually_exclusive_group(required=True)
    source.add_argument("file", nargs="?", type=Path, metavar="FILE", help="policy file (TOML)")
    source.add_argument("--sandbox", choices=PRESETS, help="a built-in preset instead of a file")
    check.add_argument("--workspace", type=Path, metavar="DIR",
                       help="what $WORKSPACE expands to (default: the current directory)")
    check.set_defaults(func=run_check)
    show = actions.add_parser("show", help="print a built-in preset's TOML",
                              description="Print a built-in preset's TOML.")
    show.add_argument("--sandbox", choices=PRESETS, required=True)
    show.set_defaults(func=run_show)


def run_check(args: argparse.Namespace) -> int:
    """Validate, resolve for this host, and print the explanation."""
    try:
        policy = load_preset(args.sandbox) if args.sandbox else load_policy(args.file)
    except PolicyInvalid as exc:
        raise RunnerError(str(exc), EXIT_CHECK_FAILED) from None
    except PolicyUnreadable as exc:
        raise RunnerError(str(exc), EXIT_BAD_INPUT) from None
    resolved = resolve(policy, **host_variables(args.workspace or Path.cwd()))
    origin = f"--sandbox {args.sandbox}" if args.sandbox else str(args.file)
    print(f"OK {origin}: policy {policy.name!r} (version {policy.version}) is valid")
    for line in explain(policy, resolved):
        print(line)
    return 0


def run_show(args: argparse.Namespace) -> int:
    print(preset_text(args.sandbox), end="")
    return 0


def explain(policy: Policy, resolved: ResolvedPolicy) -> list[str]:
    """Plain lines: each section's default, then what it allows or denies, with rule names."""
    lines = [f"  {policy.description}"] if policy.description else []
    lines.append("variables: " + "  ".join(f"${k}={v}" for k, v in resolved.variables.items()))
    return lines + _filesystem(policy, resolved) + _network(policy, resolved) + _tools(policy, resolved)


def _filesystem(policy: Policy, resolved: ResolvedPolicy) -> list[str]:
    head = "filesystem (Landlock):"
    everything = "every path readable and writable"
    if resolved.network.default == "deny":  # runner/enforce/prepare.py keeps the command in its cgroup
        everything += ", but no cgroup filesystem is writable (the network is restricted)"
    if policy.filesystem is None:
        return [f"{head} not restricted (no [filesystem] section): {everything}"]
    if "/" in resolved.filesystem.write:
        return [f"{head} not restricted (write includes /): {everything}"]
    if "/" in resolved.filesystem.read:
        lines = [f"{head} every path readable; writes only beneath the trees below, others denied (EACCES)"]
    else:
        lines = [f"{head} only the trees below are readable or writable, anything else is denied (EACCES)"]
    seen: dict[str, str] = {}
    for name, templates in (("read", policy.filesystem.read), ("write", policy.filesystem.write)):
        verb = "readable" if name == "read" else "writable (and readable)"
        for i, template in enumerate(templates):
            rule = f"filesystem.{name}[{i}]"
            path = expand_path(template, resolved.variables)
            notes = [f"from {template}"] if template != path else []
            if path in seen:
                notes.append(f"same tree as {seen[path]}")
            elif not os.path.lexists(path):
                notes.append("does not exist here: grants nothing")
            seen.setdefault(path, rule)
            lines.append(f"  {verb}: {path}  [{rule}]" + "".join(f" ({note})" for note in notes))
    if not policy.filesystem.read and not policy.filesystem.write:
        lines.append("  nothing is readable: the command cannot even be executed")
    return lines


def _network(policy: Policy, resolved: ResolvedPolicy) -> list[str]:
    head = "network (cgroup connect/sendmsg hooks; TCP and UDP, IPv4 and IPv6):"
    network = resolved.network
    if policy.network is None:
        return [f"{head} not restricted (no [network] section): every endpoint reachable"]
    lines = [f"{head} default {network.default}"]
    for rule in network.allow:
        lo, hi = rule.ports
        ports = "any port" if rule.ports == ALL_PORTS else f"port {lo}" if lo == hi else f"ports {lo}-{hi}"
        protocol = "any protocol" if rule.protocol == "any" else rule.protocol
        lines.append(f"  reachable: {rule.cidr} {ports} {protocol}  [{rule.rule}]")
    if network.default == "deny":
        lines.append("  anything else is denied (EPERM)" if network.allow else
                     "  no allow rules: every IPv4/IPv6 connect and datagram send is denied (EPERM), "
                     "loopback and DNS included")
    elif network.allow:
        lines.append("  note: with default allow the allow rules change nothing: every endpoint is reachable")
    else:
        lines.append("  every endpoint reachable")
    lines.append("  unix sockets are not governed by the network policy")
    return lines


def _tools(policy: Policy, resolved: ResolvedPolicy) -> list[str]:
    head = "tools (SDK channel):"
    tools = resolved.tools
    if policy.tools is None:
        return [f"{head} not restricted (no [tools] section): every tool allowed"]
    lines = [f"{head} default {tools.default}"]
    lines += [f"  denied: {name}  [tools.deny]" for name in tools.deny]
    lines += [f"  allowed: {name}  [tools.allow]" for name in tools.allow if name not in tools.deny]
    lines += [f"  note: {name} is in both lists: deny wins" for name in tools.allow if name in tools.deny]
    lines.append(f"  any other tool: {tools.default}  [tools.default]")
    return lines
