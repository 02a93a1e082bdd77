"""The agent's workspace: materialized as a git repository, and diffed after the run.

The agent gets a normal git repository (`workspace/.git`, one baseline
commit), which coding agents expect. The runner's own baseline is a
separate git directory outside the workspace (`baseline.git` in the run
directory), so nothing the agent does to `workspace/.git` (commits, resets,
deleting it) or to `.gitignore` changes what the diff shows: the diff adds
everything with `--force` and no exclude files. Commits use a fixed
identity and date, so the same workspace gives the same hashes every run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from blackbox.capture import sha256_ref
from blackbox.diff import DiffFacts, parse_added_lines, parse_name_status

IDENTITY = {
    "GIT_AUTHOR_NAME": "assay-runner", "GIT_AUTHOR_EMAIL": "runner@localhost",
    "GIT_COMMITTER_NAME": "assay-runner", "GIT_COMMITTER_EMAIL": "runner@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
}
_CONFIG = ("-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "core.excludesFile=",
           "-c", "core.autocrlf=false", "-c", "core.quotePath=false")


class WorkspaceError(RuntimeError):
    """git failed while preparing the workspace (the message has git's own words)."""


@dataclass(frozen=True)
class Workspace:
    """The materialized workspace and the runner's baseline of it."""

    root: Path
    baseline: Path
    mode: str
    source: Path | None
    files: int
    tree_hash: str


def git(*args: str, cwd: Path, git_dir: Path | None = None, work_tree: Path | None = None,
        check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """git with a fixed identity, no user or system config, bytes out."""
    env = {**os.environ, **IDENTITY}
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    if git_dir is not None:
        env["GIT_DIR"] = str(git_dir)
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    proc = subprocess.run(["git", *_CONFIG, *args], cwd=cwd, env=env, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    if check and proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise WorkspaceError(f"git {args[0]} failed: {err[-1] if err else proc.returncode}")
    return proc


def _commit_all(cwd: Path, git_dir: Path | None = None, work_tree: Path | None = None) -> None:
    git("add", "--all", "--force", ".", cwd=cwd, git_dir=git_dir, work_tree=work_tree)
    git("commit", "--quiet", "--allow-empty", "--no-verify", "-m", "baseline (assay-runner)",
        cwd=cwd, git_dir=git_dir, work_tree=work_tree)


def prepare(run_dir: Path, mode: str, source: Path | None, owner: tuple[int, int] | None) -> Workspace:
    """`run_dir/workspace`, empty or a copy of `source` (its own .git left out), as a git repo."""
    root = run_dir / "workspace"
    if mode == "existing":
        assert source is not None
        shutil.copytree(source, root, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    else:
        root.mkdir()
    git("init", "--quiet", cwd=root)
    _commit_all(root)
    baseline = run_dir / "baseline.git"
    git("init", "--quiet", "--bare", str(baseline), cwd=run_dir)
    _commit_all(root, git_dir=baseline, work_tree=root)
    listing = git("ls-tree", "-r", "--full-tree", "HEAD", cwd=root, git_dir=baseline).stdout
    files = listing.count(b"\n")
    if owner is not None:  # the agent runs as --user: it owns its workspace, not the evidence
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)):
                os.lchown(name, *owner)
    return Workspace(root, baseline, mode, source, files, sha256_ref(listing))


def diff(ws: Workspace, patch_path: Path) -> DiffFacts:
    """Write `fs_diff.patch` (baseline -> now, binary-safe) and return what it shows."""
    try:
        git("add", "--all", "--force", ".", cwd=ws.root, git_dir=ws.baseline, work_tree=ws.root)
        patch = git("diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "HEAD",
                    cwd=ws.root, git_dir=ws.baseline, work_tree=ws.root).stdout
        names = git("diff", "--cached", "--name-status", "-z", "--no-renames", "HEAD",
                    cwd=ws.root, git_dir=ws.baseline, work_tree=ws.root).stdout
    except (WorkspaceError, OSError, subprocess.TimeoutExpired) as exc:
        patch_path.write_bytes(b"")
        return DiffFacts(available=False, error=str(exc))
    patch_path.write_bytes(patch)
    return DiffFacts(available=True, changes=parse_name_status(names), added=parse_added_lines(patch),
                     hash=sha256_ref(patch))
