"""`assay-runner diff`: capability changes between two runs.

The kernel test observes two versions of one script at the same path; v2
reads one more file and connects to one more endpoint, and the diff must show
exactly those two additions. The other tests use synthetic archives built
with the normalizer's own functions, so they are valid v0 archives.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from normalizer.artifacts import (
    CORRELATION_SCHEMA,
    KERNEL_EVENT_SCHEMA,
    POLICY_EVENT_SCHEMA,
    RUN_EVENT_SCHEMA,
    SURFACE_SCHEMA,
    TOOL_DECISION,
    Binding,
    CapabilitySurface,
    CorrelationReport,
    KernelEvent,
    PolicyEvent,
    RunEvent,
    Window,
)
from normalizer.build import KernelLayer, NormalizedRun
from normalizer.health import CaptureFacts, observation_health
from normalizer.surface import Preview, SurfacePreview, surface_member
from runner.evidence.archive import load_members, write_archive
from runner.evidence.capdiff import decode_artifacts, diff_correlation, diff_runs, render_text, set_change
from tests.support import assay, run_observed

PROGRAMS = Path(__file__).parent / "programs" / "determinism"
PY = "/usr/bin/python3"
EMPTY_SURFACE = {"filesystem_paths": [], "network_endpoints": [], "process_execs": [],
                 "mcp_tools": [], "policy_decisions": []}


# --- kernel: v1 vs v2 of one script -----------------------------------------


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Archives of agent v1 and v2, both run as WORK/agent.py in the same workdir."""
    work = tmp_path_factory.mktemp("work")
    out = tmp_path_factory.mktemp("out")
    (work / "input.txt").write_text("input\n")
    (work / "extra.txt").write_text("extra\n")
    for version in ("v1", "v2"):
        shutil.copyfile(PROGRAMS / f"agent_{version}.py", work / "agent.py")
        proc = run_observed(out, version, PY, "agent.py", workdir=work)
        assert proc.returncode == 0, proc.stderr
    return out / "v1.tar.gz", out / "v2.tar.gz", work


@pytest.mark.kernel
def test_diff_lists_exactly_the_added_file_and_endpoint(versions) -> None:
    v1, v2, work = versions
    proc = assay("diff", "--json", v1, v2)
    assert proc.returncode == 0, proc.stderr
    diff = json.loads(proc.stdout)
    assert diff["surface"] == {
        **{name: {"added": [], "removed": []} for name in EMPTY_SURFACE},
        "filesystem_paths": {"added": [str(work / "extra.txt")], "removed": []},
        "network_endpoints": {"added": ["127.0.0.1:10"], "removed": []},
    }
    assert (diff["added"], diff["removed"]) == (2, 0)
    assert diff["health"]["fields"] == []  # coverage stays connect_only
    assert diff["correlation"]["status"] is None


@pytest.mark.kernel
def test_diff_human_view_and_fail_on(versions) -> None:
    v1, v2, work = versions
    human = assay("diff", v1, v2)
    assert human.returncode == 0, human.stderr
    assert f"    {work}/\n      + extra.txt" in human.stdout
    assert "  network_endpoints: +1 -0\n    + 127.0.0.1:10" in human.stdout
    assert "summary: 2 added, 0 removed" in human.stdout
    assert assay("diff", "--fail-on", "added", v1, v2).returncode == 1
    assert assay("diff", "--fail-on", "removed", v1, v2).returncode == 0
    assert assay("diff", "--fail-on", "any", v1, v2).returncode == 1
    back = assay("diff", "--fail-on", "removed", v2, v1)
    assert back.returncode == 1 and "- extra.txt" in back.stdout
    same = assay("diff", "--fail-on", "any", v1, v1)
    assert same.returncode == 0 and "capability surface: unchanged" in same.stdout


# --- synthetic archives -----------------------------------------------------


def synthetic(path: Path, run_id: str, files: list[str], endpoints: list[str],
              bindings: list[Binding] | None = None) -> Path:
    """A valid v0 archive whose kernel layer opens `files` and connects to `endpoints`.

    Each binding gets its policy line (tool `t`), as Assay requires one per line.
    """
    kinds = [("exec", 4, "/usr/bin/sh")] + [("openat", 1, f) for f in files]
    kinds += [("connect", 2, e) for e in endpoints]
    events = [KernelEvent(schema=KERNEL_EVENT_SCHEMA, run_id=run_id, seq=i, pid=1, event_type=t,
                          kind=k, value=v) for i, (k, t, v) in enumerate(kinds)]
    facts = CaptureFacts(drops={}, emitted={}, captured=len(events), unattributed_events=0,
                         root_seen=True, unresolved_paths=0)
    policy = [PolicyEvent(schema=POLICY_EVENT_SCHEMA, run_id=run_id, seq=i, source_event_type=TOOL_DECISION,
                          source="test", tool_call_id=b.tool_call_id, tool="t",
                          decision=b.policy_decision)  # type: ignore[arg-type]
              for i, b in enumerate(bindings or [])]
    surface = CapabilitySurface(
        schema=SURFACE_SCHEMA, run_id=run_id, filesystem_paths=sorted(set(files)),
        network_endpoints=sorted(set(endpoints)), process_execs=["/usr/bin/sh"],
        mcp_tools=["t"] if policy else [], policy_decisions=sorted({f"{p.decision}:t" for p in policy}))
    run = NormalizedRun(
        run_id=run_id,
        kernel=KernelLayer.of(events),
        health=observation_health(run_id, {e.kind for e in events}, len(events), facts, extra_notes=[],
                                  policy_layer="present" if policy else "absent"),
        surface=surface_member(surface),
        correlation=CorrelationReport(schema=CORRELATION_SCHEMA, run_id=run_id, status="clean",
                                      bindings=bindings or [], ambiguities=[]),
        phases=[RunEvent(schema=RUN_EVENT_SCHEMA, run_id=run_id, seq=0, type="run_started")],
        preview=SurfacePreview(*[Preview(count=0, first=[])] * 5),  # not shown: only the archive is used
        policy_events=policy,
    )
    write_archive(path, run_id, run.members())
    return path


def test_removed_entries_and_grouping_by_directory(tmp_path: Path) -> None:
    base = synthetic(tmp_path / "base.tar.gz", "base",
                     ["/w/a/one.txt", "/w/a/two.txt", "/w/b/three.txt"], ["10.0.0.1:443"])
    new = synthetic(tmp_path / "new.tar.gz", "new", ["/w/a/one.txt"], [])
    proc = assay("diff", base, new)
    assert proc.returncode == 0, proc.stderr
    assert "  filesystem_paths: +0 -2\n    /w/a/\n      - two.txt\n    /w/b/\n      - three.txt" \
        in proc.stdout
    assert "network_protocol_coverage: connect_only -> absent" in proc.stdout
    assert assay("diff", "--fail-on", "removed", base, new).returncode == 1
    assert assay("diff", "--fail-on", "added", base, new).returncode == 0
    full = json.loads(assay("diff", "--json", base, new).stdout)
    assert full["surface"]["filesystem_paths"]["removed"] == ["/w/a/two.txt", "/w/b/three.txt"]
    assert {"field": "network_protocol_coverage", "base": "connect_only", "new": "absent"} \
        in full["health"]["fields"]


def test_health_only_change_fails_only_on_any(tmp_path: Path) -> None:
    base = synthetic(tmp_path / "a.tar.gz", "a", ["/w/x"], [])
    new = synthetic(tmp_path / "b.tar.gz", "b", ["/w/x", "/w/x"], [])  # one more event, same surface
    assert assay("diff", "--fail-on", "added", base, new).returncode == 0
    proc = assay("diff", "--fail-on", "any", base, new)
    assert proc.returncode == 1
    assert "  note s2_kernel_capture:\n    was: monitor_events=2 " in proc.stdout
    assert "\n    now: monitor_events=3 " in proc.stdout


def test_directories_work_like_archives(tmp_path: Path) -> None:
    golden = Path(__file__).resolve().parents[1] / "golden" / "archive-minimal"
    proc = assay("diff", "--fail-on", "any", golden, golden)
    assert proc.returncode == 0, proc.stderr
    assert "summary: 0 added, 0 removed, 0 health field changes, correlation unchanged" in proc.stdout


@pytest.mark.parametrize("make", ["missing", "garbage", "invalid"])
def test_unreadable_input_exits_2_with_one_line(tmp_path: Path, make: str) -> None:
    good = synthetic(tmp_path / "good.tar.gz", "good", ["/w/x"], [])
    bad = tmp_path / "bad.tar.gz"
    if make == "garbage":
        bad.write_bytes(b"not a tarball")
    elif make == "invalid":
        golden = Path(__file__).resolve().parents[1] / "golden" / "archive-minimal"
        bad = tmp_path / "dir"
        shutil.copytree(golden, bad)
        (bad / "capability-surface.json").unlink()
    proc = assay("diff", good, bad)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"assay-runner: error: NEW {bad}: ")
    expected = {"missing": "no such archive or directory", "garbage": "unreadable",
                "invalid": "not a valid v0 archive"}[make]
    assert expected in lines[0]


# --- pure: correlation and sets ---------------------------------------------


def _binding(call_id: str, count: int, decision: str | None = "allow") -> Binding:
    return Binding(tool_call_id=call_id, policy_decision=decision, kernel_event_count=count,
                   window=Window(start="run_started", end="run_finished"))


def test_bindings_match_by_tool_call_id_never_by_position() -> None:
    def report(bindings: list[Binding], status: str = "clean",
               ambiguities: list[str] | None = None) -> CorrelationReport:
        return CorrelationReport(schema=CORRELATION_SCHEMA, run_id="r", status=status,
                                 bindings=bindings, ambiguities=ambiguities or [])

    base = report([_binding("tc_1", 2), _binding("tc_2", 1)])
    new = report([_binding("tc_3", 1), _binding("tc_1", 5)], status="partial",
                 ambiguities=["tool_call_without_id: tool=x"])
    d = diff_correlation(base, new)
    assert [b.tool_call_id for b in d.bindings_added] == ["tc_3"]
    assert [b.tool_call_id for b in d.bindings_removed] == ["tc_2"]
    assert [(c.tool_call_id, c.base[0].kernel_event_count, c.new[0].kernel_event_count)
            for c in d.bindings_changed] == [("tc_1", 2, 5)]
    assert (d.status.base, d.status.new) == ("clean", "partial")
    assert d.ambiguities.added == ["tool_call_without_id: tool=x"]
    assert diff_correlation(base, report(list(reversed(base.bindings)))).empty


def test_set_change_and_rendering_of_an_empty_diff(tmp_path: Path) -> None:
    assert set_change(["a", "b"], ["b", "c"]) == set_change(["b", "a", "a"], ["c", "b"])
    change = set_change(["a", "b"], ["b", "c"])
    assert (change.added, change.removed) == (["c"], ["a"])
    run = decode_artifacts(load_members(synthetic(tmp_path / "s.tar.gz", "s", ["/w/x"], [])))
    text = render_text(diff_runs("A", run, "B", run))
    assert text.splitlines() == [
        "capability diff: A -> B",
        "capability surface: unchanged",
        "health: unchanged",
        "correlation: unchanged",
        "summary: 0 added, 0 removed, 0 health field changes, correlation unchanged",
    ]
