"""Run policy: what the command may read, write, reach, and which tools it may call.

`model` is pure (documents, resolution, decisions, decision strings) so the
offline normalizer can import it; `load` reads policy files and the shipped
presets. The format and the enforcement are described in docs/policy.md.
"""

from policy.model import (
    AF_INET,
    AF_INET6,
    MAX_NET_RULES,
    Access,
    Decision,
    NetRule,
    Policy,
    PolicyError,
    ResolvedPolicy,
    resolve,
    split_endpoint,
    validate_policy,
)

__all__ = [
    "AF_INET",
    "AF_INET6",
    "MAX_NET_RULES",
    "Access",
    "Decision",
    "NetRule",
    "Policy",
    "PolicyError",
    "ResolvedPolicy",
    "resolve",
    "split_endpoint",
    "validate_policy",
]
