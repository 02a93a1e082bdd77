"""Keep the cgroup filesystem out of the command's Landlock write rights.

Writing a pid into some cgroup's `cgroup.procs` moves a process out of the
run's cgroup, the command's way to leave the cgroup's kill and limits.
Wherever a policy restricts writes or the network, the Landlock ruleset
therefore never grants write rights on a cgroup mount (v2 or v1), even when
a write tree contains one (a policy that writes `/sys`, or `/`, say).
Landlock rules only add rights, so a tree that contains a cgroup mount is
replaced by what is around the mount: for each directory on the way from the
tree down to the mount, every other entry of it is granted on its own. What
that costs, the policy's author should know: new entries directly in those
directories cannot be created, and symlinks among those entries are not
granted (Landlock would follow them to their target, which could be a cgroup
mount). A write tree inside a cgroup mount
is dropped. A policy that writes `/` and allows the network does not
restrict writes, Landlock is not used for them, and the cgroup filesystem is
left to ordinary permissions: a command that is not root cannot write the
cgroups the runner (root) made (docs/policy.md).
"""

from __future__ import annotations

import os

from runner.host.mounts import mounts

CGROUP_FSTYPES = frozenset({"cgroup", "cgroup2"})


def cgroup_mounts() -> list[str]:
    """Mount points of every cgroup hierarchy, v1 and v2, as visible to the runner."""
    return sorted(str(m.mount_point) for m in mounts() if m.fstype in CGROUP_FSTYPES)


def beneath(path: str, tree: str) -> bool:
    """Is `path` the tree `tree` or inside it (component by component)?"""
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def _around(tree: str, excluded: str) -> list[str]:
    """Every entry beneath `tree` except the way down to `excluded` (which is strictly beneath it)."""
    out: list[str] = []
    cur = tree
    for part in os.path.relpath(excluded, tree).split("/"):
        try:
            entries = sorted(os.listdir(cur))
        except OSError:
            return out
        out += [os.path.join(cur, e) for e in entries
                if e != part and not os.path.islink(os.path.join(cur, e))]
        cur = os.path.join(cur, part)
    return out


def without(trees: tuple[str, ...], excluded: list[str]) -> tuple[str, ...]:
    """`trees` with every path in `excluded` (and what lies beneath it) cut out."""
    result = list(trees)
    for cut in excluded:
        kept: list[str] = []
        for tree in result:
            if beneath(tree, cut):
                continue  # the tree lies inside the excluded mount
            kept += _around(tree, cut) if beneath(cut, tree) else [tree]
        result = kept
    return tuple(dict.fromkeys(result))
