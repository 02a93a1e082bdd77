"""`assay-runner determinism`: the three-run gate, its report, and the workdir restore.

Kernel tests run real workloads three times in one fixed-path workdir and
require byte-identical archives; a deliberately random file name must fail
with a report that points at it. The pure tests cover the comparison, the
excerpts, the health rule and the snapshot/restore on synthetic input.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.capture.phases import HOLD_ENV
from runner.capture.snapshot import Snapshot, SnapshotError
from runner.evidence.archive import MANIFEST, load_members
from runner.evidence.compare import (
    MAX_LINE_PAIRS,
    RunInput,
    build_report,
    check_health,
    compare_runs,
    diff_lines,
    render_text,
)
from runner.evidence.endstate import end_state, time_record
from tests.support import CLI, Archive, assay, runner_env

PROGRAMS = Path(__file__).parent / "programs" / "determinism"
PY = "/usr/bin/python3"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "archive-minimal"
KERNEL = "layers/kernel.ndjson"
SURFACE = "capability-surface.json"
HEALTH = "observation-health.json"


# --- kernel: real workloads -------------------------------------------------


def _pipeline(work: Path) -> list[str]:
    (work / "words.txt").write_text("pear apple fig apple pear apple\n")
    return ["sh", str(PROGRAMS / "pipeline.sh")]


def _fork_children(work: Path) -> list[str]:
    return [PY, str(PROGRAMS / "fork_children.py")]


def _make_j2(work: Path) -> list[str]:
    # Compile only: see cproject/Makefile for why there is no link step.
    shutil.copytree(PROGRAMS / "cproject", work, dirs_exist_ok=True)
    return ["make", "-j2"]


def _threads(work: Path) -> list[str]:
    for i in range(4):
        (work / f"input-{i}.txt").write_text(f"input {i}\n")
    return [PY, str(PROGRAMS / "threads_files.py")]


def _written(archive: Archive) -> dict[str, int]:
    """Files the run created, by path, with the (canonical) pid that wrote each."""
    return {e["value"]: e["pid"] for e in archive.kernel
            if e["kind"] == "openat" and "create" in e.get("operation_flags", [])}


def _check_pipeline(a: Archive, work: Path) -> None:
    assert {"/usr/bin/sort", "/usr/bin/uniq", "/usr/bin/tr", "/usr/bin/wc"} <= set(a.values("exec"))
    assert str(work / "sorted.txt") in _written(a)  # the first-run cache, written every run


def _check_fork_children(a: Archive, work: Path) -> None:
    written = _written(a)
    pids = {written[str(work / f"child-{i}.txt")] for i in range(4)}
    assert len(pids) == 4 and 1 not in pids, written
    assert written[str(work / "summary.txt")] == 1


def _check_make_j2(a: Archive, work: Path) -> None:
    objects = {p for p in _written(a) if p.endswith(".o")}
    assert objects == {str(work / f"{n}.o") for n in ("alpha", "beta", "gamma", "delta", "epsilon")}
    assert a.values("exec").count("/usr/bin/as") == 5


def _check_threads(a: Archive, work: Path) -> None:
    written = _written(a)
    assert {str(work / f"thread-{i}-{j}.txt") for i in range(4) for j in range(3)} <= set(written)
    assert set(written.values()) == {1}  # threads share the process's tree position


WORKLOADS: dict[str, tuple[Callable[[Path], list[str]], Callable[[Archive, Path], None]]] = {
    "pipeline": (_pipeline, _check_pipeline),
    "fork-children": (_fork_children, _check_fork_children),
    "make-j2": (_make_j2, _check_make_j2),
    "threads": (_threads, _check_threads),
}


def _tree(root: Path) -> dict[str, tuple[int, bytes | None, int]]:
    """Every entry under root: mode, contents (files), mtime in ns."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_mode, p.read_bytes() if p.is_file() else None,
                                         st.st_mtime_ns)
    return out


def determinism(out: Path, run_id: str, work: Path, *cmd: str, extra: tuple[str, ...] = ()):
    """Run the gate like a user; returns the process and the parsed JSON report."""
    proc = assay("determinism", "--runs", "3", "--run-id", run_id, "--out", out,
                 "--workdir", work, *extra, "--", *cmd)
    assert proc.returncode != 125, proc.stderr
    report_path = out / "determinism-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return proc, report


@pytest.mark.kernel
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_deterministic_workloads_give_identical_archives(tmp_path: Path, name: str) -> None:
    setup, check = WORKLOADS[name]
    work = tmp_path / "work"
    work.mkdir()
    cmd = setup(work)
    before = _tree(work)
    proc, report = determinism(tmp_path / "out", name, work, *cmd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["identical"] and report["passed"] and report["differing_members"] == []

    archives = [Archive(tmp_path / "out" / f"run-{i}" / f"{name}.tar.gz") for i in (1, 2, 3)]
    first = archives[0].path.read_bytes()
    assert all(a.path.read_bytes() == first for a in archives[1:])
    manifests = [a.json(MANIFEST)["files"] for a in archives]
    assert manifests[0] == manifests[1] == manifests[2]
    assert manifests[0][KERNEL]["bytes"] > 0
    assert len({r["archive_sha256"] for r in report["runs"]}) == 1
    assert [r["exit_code"] for r in report["runs"]] == [0, 0, 0]
    assert all(r["health"]["passing"] for r in report["runs"])
    check(archives[0], work)
    assert "run 2/3" in proc.stderr and "result: PASS" in proc.stdout
    assert proc.stderr.count('"normalized_by": "live"') == 3  # the live pass made all three (live.py)
    assert _tree(work) == before  # the check leaves the workdir as it found it


@pytest.mark.kernel
def test_random_file_name_fails_and_the_report_points_at_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc, report = determinism(tmp_path / "out", "rnd", work, "sh", str(PROGRAMS / "random_name.sh"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not report["identical"] and not report["passed"]
    differing = {d["member"]: d for d in report["differing_members"]}
    assert {MANIFEST, SURFACE, KERNEL} <= set(differing)

    names = [
        next(p for p in Archive(tmp_path / "out" / f"run-{i}" / "rnd.tar.gz").surface["filesystem_paths"]
             if "/out." in p)
        for i in (1, 2, 3)
    ]
    assert len(set(names)) == 3 and all(n.startswith(str(work / "out.")) for n in names)
    # The JSON report: excerpts of both sides carry the whole path, set changes name it.
    first = differing[KERNEL]["runs"][0]
    assert first["run"] == 2 and first["base_run"] == 1
    pair = first["lines"][0]
    assert names[0] in pair["base"] and names[1] in pair["other"]
    assert differing[SURFACE]["runs"][0]["surface_changes"] == {
        "filesystem_paths": {"added": [names[1]], "removed": [names[0]]}
    }
    # The readable report says the same.
    assert f"{KERNEL} differs:" in proc.stdout and f"{SURFACE} differs:" in proc.stdout
    assert f"only in run 3: {names[2]}" in proc.stdout
    # the end state names them too: each run's file is absent after the others
    workdir = {d["path"]: d["entries"] for d in report["workdir_differences"]}
    assert sorted(workdir) == sorted(n.removeprefix(f"{work}/") for n in names)
    assert all(entries.count(None) == 2 for entries in workdir.values())
    assert "result: FAIL (members differ; workdir end state differs)" in proc.stdout
    assert not any(work.iterdir())  # restored: the random files are gone


def _held_flood(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`determinism --runs 2` of an open flood into a one-page ring whose reader is held
    (HOLD_ENV): every run overflows it, whatever the reader's speed."""
    flood = Path(__file__).parent / "programs" / "open_flood.py"
    return assay("determinism", "--runs", "2", "--run-id", "flood", "--out", tmp_path / "out",
                 "--workdir", tmp_path, "--ringbuf-pages", "1", *extra, "--", PY, flood, "2000",
                 env=runner_env(**{HOLD_ENV: "1"}))


@pytest.mark.kernel
def test_unhealthy_runs_fail_and_say_which_run_and_why(tmp_path: Path) -> None:
    proc = _held_flood(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "determinism-report.json").read_text())
    assert not report["health_passing"] and not report["passed"]
    assert {f["run"] for f in report["health_failures"]} == {1, 2}
    for run in (1, 2):
        fields = {f["field"] for f in report["health_failures"] if f["run"] == run}
        assert {"kernel_layer", "ringbuf_drops"} <= fields
        assert f"run {run}: kernel_layer=partial_ringbuf_drops (passing needs complete)" in proc.stdout
        assert not report["runs"][run - 1]["health"]["passing"]
    assert "health not passing" in proc.stdout


@pytest.mark.kernel
def test_allow_unhealthy_passes_on_identical_members_and_still_names_the_drops(tmp_path: Path) -> None:
    """--allow-unhealthy: the verdict is on the members alone; health is still reported.

    With the reader held, the ring keeps the same first records every run and
    drops the same rest, so the unhealthy archives are byte-identical.
    """
    proc = _held_flood(tmp_path, "--allow-unhealthy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "determinism-report.json").read_text())
    assert report["identical"] and report["passed"] and not report["health_passing"]
    assert {f["run"] for f in report["health_failures"]} == {1, 2}
    drops = [r["health"]["ringbuf_drops"] for r in report["runs"]]
    assert drops[0] == drops[1] > 0
    assert "run 1: kernel_layer=partial_ringbuf_drops (passing needs complete)" in proc.stdout
    assert "allowed by --allow-unhealthy" in proc.stdout


# --- bad input: exit 2 with one line, before anything runs ------------------


@pytest.mark.kernel  # needs root: the scratch directory is in root's state directory
@pytest.mark.parametrize(("args", "message"), [
    (("--runs", "1", "--", "true"), "--runs must be at least 2"),
    (("--",), "no command given"),
    (("--", "no-such-command-xyz"), "command not found"),
    (("--run-id", "a/b", "--", "true"), "invalid --run-id"),
])
def test_unusable_input_exits_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = assay("determinism", "--out", tmp_path / "out", "--workdir", tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("assay-runner: error: ") and message in lines[0]
    assert not (tmp_path / "out").exists()


def test_missing_workdir_exits_2(tmp_path: Path) -> None:
    proc = assay("determinism", "--workdir", tmp_path / "nope", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2 and "is not a directory" in proc.stderr


@pytest.mark.kernel  # needs root: drops to uid 65534
def test_not_root_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """The scratch directory is root's: as nobody, one line and exit 2, nothing written."""
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *CLI, "determinism",
         "--out", tmp_path / "out", "--workdir", "/usr/share", "--", "true"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd="/", env=runner_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("assay-runner: error: cannot create a scratch directory")
    assert "determinism needs root" in lines[0]
    assert not (tmp_path / "out").exists()


# --- pure: comparison, excerpts, health, report -----------------------------


def _golden() -> dict[str, bytes]:
    return load_members(GOLDEN)


def _replace(members: dict[str, bytes], name: str, old: str, new: str) -> dict[str, bytes]:
    changed = dict(members)
    assert old.encode() in changed[name]
    changed[name] = changed[name].replace(old.encode(), new.encode())
    return changed


def test_identical_runs_have_no_differences() -> None:
    assert compare_runs([_golden(), _golden(), _golden()]) == []


def test_a_changed_path_is_located_and_shown_whole() -> None:
    long_dir = "/tmp/" + "deep/" * 12 + "work"
    base = _replace(_golden(), KERNEL, "/tmp/assay-runner/work/input.txt", f"{long_dir}/in.AAAAAA")
    other = _replace(base, KERNEL, "in.AAAAAA", "in.BBBBBB")
    (diff,) = compare_runs([base, base, other])
    assert diff.member == KERNEL
    (run,) = diff.runs
    assert (run.run, run.base_run, run.differing_lines, run.base_lines) == (3, 1, 1, 4)
    (pair,) = run.lines
    assert pair.line == 4
    assert pair.base.startswith('…"value":"') and f"{long_dir}/in.AAAAAA" in pair.base
    assert f"{long_dir}/in.BBBBBB" in pair.other and pair.other.endswith("…")
    line = base[KERNEL].decode().splitlines()[3]
    assert line[pair.column - 1:].startswith("AAAAAA")


def test_line_pairs_are_bounded_but_counted() -> None:
    base = {"x.ndjson": "".join(f'{{"n":{i}}}\n' for i in range(12)).encode()}
    other = {"x.ndjson": "".join(f'{{"n":{i + 100}}}\n' for i in range(12)).encode()}
    count, pairs = diff_lines(base["x.ndjson"], other["x.ndjson"])
    assert count == 12 and len(pairs) == MAX_LINE_PAIRS
    report = build_report("r", ["cmd"], "/w", [RunInput("a", "sha256:1", 0, base),
                                               RunInput("b", "sha256:2", 0, other)], True)
    assert "… 7 more differing line(s)" in render_text(report)


def test_extra_and_missing_lines_and_members() -> None:
    base = _golden()
    longer = dict(base)
    longer[KERNEL] = base[KERNEL] + base[KERNEL].splitlines(keepends=True)[-1]
    fewer = {k: v for k, v in base.items() if k != "layers/sdk.ndjson"}
    diffs = {d.member: d for d in compare_runs([base, longer, fewer])}
    (extra,) = diffs[KERNEL].runs
    assert (extra.base_lines, extra.other_lines, extra.differing_lines) == (4, 5, 1)
    assert extra.lines[0].base is None and extra.lines[0].line == 5
    (missing,) = diffs["layers/sdk.ndjson"].runs
    assert missing.run == 3 and missing.other_lines is None
    report = build_report("r", ["c"], "/w", [RunInput(str(i), "sha256:x", 0, m)
                                             for i, m in enumerate([base, longer, fewer])], False)
    assert "missing in run 3" in render_text(report)


def test_health_must_pass_strictly() -> None:
    status, failures = check_health(1, _golden())
    assert status is not None and status.passing and failures == []
    bad = _replace(_golden(), HEALTH, '"ringbuf_drops":0', '"ringbuf_drops":7')
    bad = _replace(bad, HEALTH, '"cgroup_correlation":"clean"', '"cgroup_correlation":"partial"')
    status, failures = check_health(2, bad)
    assert status is not None and not status.passing
    assert [f.message for f in failures] == [
        "run 2: ringbuf_drops=7 (passing needs 0)",
        "run 2: cgroup_correlation=partial (passing needs clean)",
    ]
    _, failures = check_health(3, {k: v for k, v in _golden().items() if k != HEALTH})
    assert failures[0].message == f"run 3: {HEALTH} missing"


def test_verdict_exit_codes_and_allow_unhealthy() -> None:
    good = _golden()
    bad = _replace(good, HEALTH, '"kernel_layer":"complete"', '"kernel_layer":"absent"')

    def verdict(codes: list[int], runs: list[dict[str, bytes]], allow: bool = False):
        inputs = [RunInput(f"run-{i}", "sha256:x", c, m)
                  for i, (c, m) in enumerate(zip(codes, runs, strict=True))]
        return build_report("r", ["c"], "/w", inputs, allow)

    assert verdict([0, 0, 0], [good] * 3).passed
    mismatch = verdict([0, 1, 0], [good] * 3)
    assert not mismatch.passed and not mismatch.exit_codes_match
    assert "exit codes differ: run 1: 0, run 2: 1, run 3: 0" in render_text(mismatch)
    assert verdict([3, 3, 3], [good] * 3).passed  # the same failure every time is deterministic
    assert not verdict([0, 0, 0], [bad] * 3).passed
    allowed = verdict([0, 0, 0], [bad] * 3, allow=True)
    assert allowed.passed and not allowed.health_passing
    assert "allowed by --allow-unhealthy" in render_text(allowed)


# --- pure: workdir end states -------------------------------------------------


def test_end_state_records_type_mode_and_content_never_times(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "d" / ".git").mkdir(parents=True)
    (work / "d" / "a.txt").write_text("a\n")
    (work / "d" / ".git" / "index").write_bytes(b"DIRC stat data")
    os.symlink("d/a.txt", work / "link")
    os.mkfifo(work / "fifo")
    (work / os.fsdecode(b"bad\xffname")).write_text("x")
    (work / "out").mkdir()
    (work / "out" / "a.tar.gz").write_text("excluded")
    for path in work.rglob("*"):  # modes independent of the umask
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(work / "d", 0o750)
    state = end_state(work, frozenset({work / "out"}))
    digest = "sha256:" + hashlib.sha256(b"a\n").hexdigest()
    assert state == {
        "bad\\xffname": "file 0644 sha256:" + hashlib.sha256(b"x").hexdigest(),
        "d": "dir 0750",
        "d/.git": "dir 0755",
        "d/.git/index": "file 0644 content not compared (git index)",
        "d/a.txt": f"file 0644 {digest}",
        "fifo": "special 0644 10000",
        "link": "symlink -> d/a.txt",
    }
    os.utime(work / "d" / "a.txt", (1, 1))
    (work / "d" / ".git" / "index").write_bytes(b"DIRC other stat data")
    assert end_state(work, frozenset({work / "out"})) == state
    assert time_record("repo/.git/index") == time_record(".git/index") == "git index"
    assert [time_record(p) for p in ("repo/git/index", "repo/x.git/index", ".git/index2")] == [None] * 3
    cacache = "npm-cache/_cacache/index-v5/f0/0b/e03952943f45c5204d8ba3e6df81e5cb83f0dbf66fda69a0851c8018caed"
    assert time_record(cacache) == "npm cache index"
    assert time_record(cacache.replace("index-v5", "content-v2")) is None


def test_differing_end_states_fail_the_verdict_and_name_each_path() -> None:
    good = _golden()
    runs = [RunInput(f"run-{i}", "sha256:x", 0, good) for i in (1, 2, 3)]
    same = {"a.txt": "file 0644 sha256:1", "repo/.git/index": "file 0644 content not compared (git index)"}
    report = build_report("r", ["c"], "/w", runs, False, [same, same, same])
    assert report.passed and report.workdir_compared and report.workdir_identical
    assert report.content_not_compared == ["repo/.git/index"]
    assert "identical after every run (1 time-recording cache file(s)" in render_text(report)
    other = {**same, "a.txt": "file 0644 sha256:2", "extra": "dir 0755"}
    report = build_report("r", ["c"], "/w", runs, False, [same, other, same])
    assert report.identical and not report.passed and not report.workdir_identical
    assert [(d.path, d.entries) for d in report.workdir_differences] == [
        ("a.txt", ["file 0644 sha256:1", "file 0644 sha256:2", "file 0644 sha256:1"]),
        ("extra", [None, "dir 0755", None]),
    ]
    assert len({r.workdir_sha256 for r in report.runs}) == 2
    text = render_text(report)
    assert "workdir end state: 2 path(s) differ" in text and "    run 1: (absent)" in text
    assert text.endswith("result: FAIL (workdir end state differs)")
    assert build_report("r", ["c"], "/w", runs, False).workdir_compared is False


# --- pure: workdir snapshot and restore -------------------------------------


def test_restore_undoes_a_run(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "a.c").write_text("int a;\n")
    (work / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(work / "run.sh", 0o750)
    os.symlink("src/a.c", work / "link")
    os.utime(work / "src" / "a.c", ns=(1_000_000_000, 1_000_000_123))
    keep = work / "runs"
    keep.mkdir()
    (keep / "old.tar.gz").write_text("kept")
    snap = Snapshot.take(work, tmp_path / "snap", frozenset({keep}))
    before = {k: v for k, v in _tree(work).items() if not k.startswith("runs")}

    # What a run might do: create, modify, chmod, delete, replace a dir by a file.
    (work / "src" / "a.c").write_text("changed\n")
    (work / "src" / "a.o").write_text("obj")
    os.chmod(work / "run.sh", 0o600)
    (work / "link").unlink()
    shutil.rmtree(work / "src")
    (work / "src").write_text("now a file")
    (work / "__pycache__").mkdir()
    (keep / "new.tar.gz").write_text("also kept")

    snap.restore()
    after = _tree(work)
    assert {k: v for k, v in after.items() if not k.startswith("runs")} == before
    assert stat.S_IMODE(after["run.sh"][0]) == 0o750
    assert after["src/a.c"][2] == 1_000_000_123
    assert os.readlink(work / "link") == "src/a.c"
    assert sorted(p.name for p in keep.iterdir()) == ["new.tar.gz", "old.tar.gz"]
    assert not (tmp_path / "snap" / "runs").exists()


def test_snapshot_refuses_fifos_and_overlap(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(SnapshotError, match="overlaps"):
        Snapshot.take(work, work / "snap")
    os.mkfifo(work / "pipe")
    with pytest.raises(SnapshotError, match="not a regular file, directory or symlink"):
        Snapshot.take(work, tmp_path / "snap")
