"""`show` folds the noise of a git + python job (failed PATH-search execs, files only looked for,
read-only directories, subshell forks) and loses no capability doing it (runner/review/fold.py).

The job, a python script that drives git, runs under the runner with a PATH
of eight missing directories, then pyenv-shaped shims (SHIMS), then the
system's, as a user's PATH with ~/.local, cargo and pyenv entries is: `env`
(every `#!/usr/bin/env` line) and Python's subprocess look `python3`,
`bash` and every `git` up through them, one failed execve per entry.
The capability sets (programs run, files opened with at least one
success and how, endpoints, blocks) are read back from the text of
`show --all` (nothing folded), of `show`, and from `show --json`, and compared.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import Archive, assay, run_observed, runner_env, unique_run_id

pytestmark = pytest.mark.kernel

MISSING = [f"/nonexistent-{n}/bin" for n in range(8)]
JOB = """#!/usr/bin/env python3
import subprocess
def git(*args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, cwd="r")
subprocess.run(["git", "init", "-q", "r"], check=True)
with open("r/f", "w") as f:
    f.write("a")
git("add", "f")
git("commit", "-qm", "x")
git("status", "-s")
git("log", "-q")
"""
"""A python script that drives git, started through its `#!/usr/bin/env` line, as most are."""
SHIMS = {
    # pyenv's shape, cut down: a shim per program, a dispatcher, subcommands found on PATH, each a bash
    # script started through `#!/usr/bin/env bash` (so `env` looks bash up through PATH every time).
    "shims/python3": 'exec pyenv exec python3 "$@"',
    "libexec/pyenv": 'exec "pyenv-$1" "${@:2}"',
    "libexec/pyenv-exec": ('version="$(pyenv-version-name)"; program="$(pyenv-which "$1")"; '
                           'pyenv-hooks exec >/dev/null; exec "$program" "${@:2}"'),
    "libexec/pyenv-version-name": "echo system",
    "libexec/pyenv-which": 'pyenv-hooks which >/dev/null; echo "/usr/bin/$1"',
    "libexec/pyenv-hooks": "echo",
}
SECTIONS = ("processes:", "files by directory:", "transient names", "endpoints:", "blocks:", "tool calls:",
            "phases:")


def _section(text: str, name: str) -> list[str]:
    """The lines of a section, [] when left out ("none")."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(name)), len(lines)) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(SECTIONS)), len(lines))
    return [line for line in lines[start:end] if line]


def _capabilities(text: str) -> dict[str, set[str]]:
    """What a reader of the text learns the command could do."""
    programs = set()
    for line in _section(text, "processes:"):
        exec_line = line.strip()
        if exec_line.startswith("exec ") and "(failed, errno" not in exec_line:
            programs.add(re.sub(r"  \(after \d+ failed PATH lookups?\)$", "", exec_line))
    files, directory = set(), ""
    for line in _section(text, "files by directory:"):
        if line.startswith("  not found:"):
            continue
        if m := re.fullmatch(r"  (.*)/  \[(.*?)\]: (.*)", line):
            files |= {f"{m[1]}/{name} [{m[2]}]" for name in m[3].split(", ")}
        elif m := re.fullmatch(r"  (/.*?)  \[(.*?)\] opens=(\d+)(?: failed=(\d+))?.*", line):
            if int(m[3]) > int(m[4] or 0):
                files.add(f"{m[1]} [{m[2]}]")
        elif line.startswith("    "):
            m = re.fullmatch(r"    (.*?)  \[(.*?)\] opens=(\d+)(?: failed=(\d+))?.*", line)
            assert m, line
            if int(m[3]) > int(m[4] or 0):
                files.add(f"{directory}/{m[1]} [{m[2]}]")
        else:
            directory = line.strip().removesuffix("/")
    return {"programs": programs, "files": files,
            "endpoints": set(_section(text, "endpoints:")) - {"  none"},
            "blocks": set(_section(text, "blocks:")) - {"  none"}}


def test_show_of_a_git_and_python_job_is_three_times_shorter_and_loses_nothing(tmp_path: Path) -> None:
    run_id = unique_run_id("fold")
    pyenv = tmp_path / "pyenv"
    for name, body in SHIMS.items():
        (pyenv / name).parent.mkdir(parents=True, exist_ok=True)
        (pyenv / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (pyenv / name).chmod(0o755)
    path = [*MISSING, str(pyenv / "shims"), str(pyenv / "libexec"), "/usr/local/bin", "/usr/bin", "/bin"]
    env = runner_env(PATH=":".join(path))
    work = tmp_path / "work"
    work.mkdir()
    script = work / "job.py"
    script.write_text(JOB)
    script.chmod(0o755)
    proc = run_observed(tmp_path / "out", run_id, script, workdir=work, env=env)
    assert proc.returncode == 0, proc.stderr
    archive = tmp_path / "out" / f"{run_id}.tar.gz"
    folded, unfolded = assay("show", archive).stdout, assay("show", "--all", archive).stdout
    view = json.loads(assay("show", "--json", archive).stdout)

    failed_lookups = sum(1 for p in view["processes"] for x in p["execs"] if x["result"] == "error")
    assert failed_lookups >= 8 * 6, "python3 and git were looked up through the missing PATH entries"
    assert "failed PATH lookups)" in folded and "(failed, errno 2)" in unfolded
    assert len(folded.splitlines()) * 3 <= len(unfolded.splitlines()), (len(folded.splitlines()),
                                                                        len(unfolded.splitlines()))
    assert _capabilities(folded) == _capabilities(unfolded)
    # and both are the data's: every successful exec's program, every file opened with success
    programs = {x["path"] for p in view["processes"] for x in p["execs"] if x["result"] == "success"}
    assert {"/usr/bin/git", "/usr/bin/python3", "/usr/bin/bash"} <= programs
    shown = " ".join(_capabilities(folded)["programs"])
    assert all(path in shown for path in programs)
    opened = {f["path"] for g in view["directories"] for f in g["files"] if f["opens"] > f["failed"]}
    assert {f.rsplit(" [", 1)[0] for f in _capabilities(folded)["files"]} == opened
    # the verdict and the capabilities come first
    head = folded.splitlines()[:10]
    assert head[2].startswith("health: PASSING") and head[3] == "capabilities:"
    assert any(line.startswith("  programs run (") and "/usr/bin/git" in line for line in head)


def test_the_summary_and_show_agree_and_an_o_tmpfile_directory_is_not_a_file_written(tmp_path: Path) -> None:
    """`tempfile.TemporaryFile()` opens /tmp itself with O_TMPFILE for writing: that names the directory of
    an unnamed file, not a file written. And the run length is the command's, in both places."""
    run_id = unique_run_id("tmpfile")
    script = ("import tempfile, time; tempfile.TemporaryFile().write(b'x'); open('real.txt', 'w'); "
              "time.sleep(0.3)")
    proc = run_observed(tmp_path / "out", run_id, "/usr/bin/python3", "-c", script, workdir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    archive = tmp_path / "out" / f"{run_id}.tar.gz"
    kernel = [json.loads(line) for line in Archive(archive).members["layers/kernel.ndjson"].splitlines()]
    assert any(e["kind"] == "openat" and e["value"] == "/tmp" and e["access_mode"] == "read_write"
               for e in kernel), "the O_TMPFILE open is in the evidence"
    written = re.search(r"files written: +(\d+): (.*)", proc.stderr)
    # (tempfile also writes and removes a probe file in /tmp first: a transient name, /tmp/~1)
    assert written and f"{tmp_path}/real.txt" in written[2].split(", "), proc.stderr
    assert "/tmp" not in written[2].split(", "), proc.stderr
    view = json.loads(assay("show", "--json", archive).stdout)
    assert f"{tmp_path}/real.txt" in view["summary"]["files_written"]
    assert "/tmp" not in view["summary"]["files_written"]
    length = re.search(r"command exited 0 after ([\d.]+)s", proc.stderr)
    assert length and float(length[1]) >= 0.3
    assert f"command ran {length[1]}s" in assay("show", archive).stdout
