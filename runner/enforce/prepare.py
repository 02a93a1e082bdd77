"""Turn a resolved policy into what the kernel enforces for one run.

Files: a Landlock ruleset (runner/enforce/landlock.py), only when the policy limits
reads or writes. Syscalls: the seccomp filter's rules (runner/enforce/seccomp.py),
for every run; a policy that restricts writes or the network confines the
command further (user namespaces, io_uring, clone3). Network: the cgroup
sock_addr programs' rule table (ebpf/netpolicy.c), only when the default is
deny. Tools are answered on the
SDK channel (runner/capture/sdk_server.py) from `ResolvedPolicy.tool_decision`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import msgspec

from ebpf.monitor import NetPolicySpec, NetRuleSpec
from policy.model import ResolvedPolicy
from runner.enforce.cgroupfs import beneath, cgroup_mounts, without
from runner.enforce.landlock import FilePolicy, Ruleset, kernel_abi, require_enforceable
from runner.enforce.seccomp import Machine, Rules, machine


@dataclass(frozen=True)
class Enforcement:
    """The kernel-side pieces of a policy; ruleset and net are None without a policy."""

    ruleset: Ruleset | None = None
    net: NetPolicySpec | None = None
    syscalls: Rules = field(default_factory=Rules)
    machine: Machine | None = None
    """The syscall table the filter is built for; None when no filter is needed."""

    def close(self) -> None:
        """Release the runner's copy of the ruleset once the command has it."""
        if self.ruleset is not None:
            self.ruleset.close()


def _files(policy: ResolvedPolicy) -> FilePolicy:
    """The Landlock trees of `policy`; where it restricts writes or the network, cgroup mounts are
    never writable, so the command cannot leave the run's cgroup (and its kill and limits).

    A cgroup mount cut out of a write tree stays readable (write implied read
    there): runner/enforce/cgroupfs.py. A policy that writes `/` and denies
    network gets `/` with the cgroup mounts cut out, and that cut is all
    Landlock restricts for it (`FilePolicy.cgroups_only`).
    """
    read, write = tuple(policy.filesystem.read), tuple(policy.filesystem.write)
    writes_all = "/" in write
    if writes_all and policy.network.default != "deny":
        return FilePolicy(read=read, write=write)
    mounts = cgroup_mounts()
    inside = [t for t in write if any(beneath(t, m) for m in mounts)]
    around = [m for m in mounts if any(beneath(m, t) for t in write)]
    return FilePolicy(read=read + tuple(inside) + tuple(around), write=without(write, mounts),
                      cgroups_only=writes_all)


def check(policy: ResolvedPolicy | None) -> None:
    """Fail early, before anything is created, when the kernel cannot enforce `policy`."""
    if policy is not None:
        require_enforceable(_files(policy), kernel_abi())


def prepare(policy: ResolvedPolicy | None, allow_compat_syscalls: bool = False) -> Enforcement:
    """Build what `policy` needs; a policy the kernel cannot enforce raises RunnerError."""
    if policy is None:
        return _with_filter(Enforcement(), Rules(refuse_compat=not allow_compat_syscalls))
    files = _files(policy)
    ruleset = Ruleset(files) if files.restricts_reads or files.restricts_writes else None
    net = None
    if policy.network.default == "deny":
        rules = tuple(NetRuleSpec(**msgspec.structs.asdict(r)) for r in policy.net_rules_for_bpf())
        net = NetPolicySpec(rules=rules, default_allow=False)
    confine = files.restricts_writes or net is not None
    return _with_filter(Enforcement(ruleset=ruleset, net=net),
                        Rules(refuse_compat=not allow_compat_syscalls, confine=confine))


def _with_filter(enforcement: Enforcement, rules: Rules) -> Enforcement:
    """`enforcement` with the seccomp rules; a machine without a syscall table fails here."""
    return replace(enforcement, syscalls=rules, machine=machine() if rules.needed else None)

