"""May the command touch `--out`? Checked before anything is created.

Evidence the command can rewrite is no evidence, so `run` refuses an `--out`
the command could write, or could redirect: a directory on the way to it
(symlinks followed, hop by hop, as the kernel does) in which the command
could replace the next entry by a symlink or another directory. The command
can change an entry E of directory D when both of these allow it:

- the policy in force: Landlock grants write rights beneath D (no policy, or
  one that writes `/`, grants them everywhere);
- ordinary permissions, asked as the command's uid/gids in a forked child
  (access(2), so ACLs count): D is writable by it, or owned by it (an owner
  can chmod), and D is not sticky or E (or D) belongs to it.

Entries that do not exist yet count as the runner's (root's): the runner
creates them. A command running as root without a write-restricting policy
can change anything, so no `--out` is safe from it: that case is allowed
(root was asked for, or the runner itself was started as root without
sudo), logged as a warning, and documented (docs/architecture.md,
"Protecting the evidence").
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from policy.model import ResolvedPolicy
from runner.enforce.cgroupfs import beneath
from runner.enforce.dac import ask_as
from runner.enforce.identity import Credentials
from runner.errors import RunnerError

MAX_HOPS = 40  # the kernel's own symlink limit


@dataclass(frozen=True)
class Step:
    """One lookup on the way to `--out`: entry `name` of directory `parent`."""

    parent: str
    name: str


def lookups(path: Path) -> tuple[list[Step], str]:
    """Every (directory, entry) lookup resolving `path` makes, and the directory it ends in.

    Symlinks are expanded where they are met, so the directories a link's
    target passes through are checked too. Missing components end the walk
    (the runner will create them, beneath the last existing directory).
    """
    todo = [p for p in str(path).split("/") if p]
    cur = "/"
    steps: list[Step] = []
    hops = 0
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        if name == "..":
            cur = os.path.dirname(cur)
            continue
        steps.append(Step(cur, name))
        nxt = os.path.join(cur, name)
        try:
            st = os.lstat(nxt)
        except OSError:  # missing (we create it), or not a directory (mkdir will say so)
            break
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_HOPS:
                raise RunnerError(f"--out {path}: too many levels of symbolic links")
            target = os.readlink(nxt)
            todo = [p for p in target.split("/") if p] + todo
            if target.startswith("/"):
                cur = "/"
        else:
            cur = nxt
    return steps, cur


def _policy_writes(policy: ResolvedPolicy | None, path: str) -> bool:
    """Does the policy's Landlock ruleset let the command write `path` (a real path)?

    Landlock binds each tree to the inode its path resolves to, so a tree
    given through a symlink covers the symlink's target: compare real paths.
    """
    if policy is None:
        return True
    return any(beneath(path, os.path.realpath(tree)) for tree in policy.filesystem.write)


def _owner(path: str) -> int:
    try:
        return os.lstat(path).st_uid
    except FileNotFoundError:
        return 0  # the runner will create it


def _writable_as(user: Credentials, dirs: list[str]) -> dict[str, bool]:
    """access(W_OK) for each directory as `user`; a missing answer counts as writable (fail closed)."""
    answers = ask_as(user, lambda: {d: os.access(d, os.W_OK) for d in dirs})
    return {d: answers.get(d, True) for d in dirs}


def command_controls(out: Path, user: Credentials, policy: ResolvedPolicy | None) -> str | None:
    """Why the command could change `--out` or redirect it, or None when it cannot."""
    steps, final = lookups(out)
    dirs = sorted({s.parent for s in steps} | {final})
    writable = _writable_as(user, dirs)

    def can_change(directory: str) -> bool:
        return _policy_writes(policy, directory) and (writable[directory] or _owner(directory) == user.uid)

    for step in steps:
        if not can_change(step.parent):
            continue
        entry = os.path.join(step.parent, step.name)
        sticky = os.stat(step.parent).st_mode & stat.S_ISVTX
        if not sticky or user.uid in (_owner(entry), _owner(step.parent)):
            kind = "a symlink" if os.path.islink(entry) else "an entry"
            return f"{entry} is {kind} in {step.parent}, which the command can change"
    if os.path.isdir(out) and can_change(final):
        return f"{final} is writable by the command"
    return None


def unconfined_root(user: Credentials, policy: ResolvedPolicy | None) -> bool:
    """Root without a policy that restricts writes: every path is the command's to change."""
    return user.uid == 0 and _policy_writes(policy, "/")


def check_out(out: Path, user: Credentials, policy: ResolvedPolicy | None) -> None:
    """Refuse (RunnerError) an --out the command could write or redirect.

    Callers decide what to do for `unconfined_root` first: there, every
    --out would be refused.
    """
    reason = command_controls(Path(os.path.abspath(out)), user, policy)
    if reason is not None:
        raise RunnerError(
            f"--out {out} is not safe from the command ({reason}; uid {user.uid}): "
            "choose a directory the command cannot write, such as the default /var/lib/assay-runner/runs"
        )
