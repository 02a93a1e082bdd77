"""The demo run's HTML report, rendered in Debian's headless Chromium.

The demo run is `make demo`'s command (the OpenAI Agents SDK fixture under
its policy) with a copy of the workspace. The page must render without a
console error and without a single network request besides the file itself,
and show what the view holds: one tree node per process, one window per
tool call, one mark per kernel event inside the windows. The full-page
screenshot is kept in build/test-artifacts/ for a human to look at.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from runner.acceptance.gates import SDK
from tests.browser import CHROMIUM, render
from tests.support import ROOT, assay

AGENT = ROOT / "fixtures" / "agent"
VENV_PY = ROOT / ".venv" / "bin" / "python"
ARTIFACTS = ROOT / "build" / "test-artifacts"
COUNTS = """JSON.stringify({
  processes: document.querySelectorAll('#process-tree li.proc').length,
  windows: document.querySelectorAll('#timeline-overview rect.tool-window').length,
  events: document.querySelectorAll('#timeline line.kernel-event').length,
  phases: document.querySelectorAll('#timeline-overview line.phase').length,
  verdict: document.getElementById('verdict').textContent.trim(),
})"""


def _needs(reason: str | None) -> None:
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def _chromium() -> str | None:
    if Path(CHROMIUM).exists():
        return None
    return "chromium is not installed: make setup (apt-get install chromium)"


def test_the_console_check_sees_errors_and_requests(tmp_path: Path) -> None:
    """The detector can fail: a page with a console error, an exception and a fetch is caught."""
    _needs(_chromium())
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><p>x</p><img src="http://192.0.2.1/x.png">'
                    '<script>console.error("boom"); missingFunction();</script>')
    report = render(page)
    assert "boom" in report.console_errors
    assert any("missingFunction" in e or "Uncaught" in e for e in report.console_errors)
    assert "http://192.0.2.1/x.png" in report.requests


@pytest.mark.kernel
def test_demo_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    _needs(_chromium())
    _needs(None if VENV_PY.exists() else f"{VENV_PY} missing: make setup")
    _needs(SDK.missing(str(VENV_PY)))
    workspace = tmp_path / "workspace"
    shutil.copytree(AGENT / "workspace", workspace, ignore=shutil.ignore_patterns("notes"))
    out = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k != "OUTSIDE"}
    done = assay("run", "--out", out, "--run-id", "demo", "--policy", AGENT / "policy.toml",
                 "--workdir", workspace, "--", VENV_PY, "-B", AGENT / "openai_agent.py", env=env)
    assert done.returncode == 0, done.stderr
    archive = out / "demo.tar.gz"
    html_file = tmp_path / "report.html"
    assert assay("report", archive, "-o", html_file).returncode == 0
    view = json.loads(assay("show", archive, "--json").stdout)
    assert view["spool"] == str(out / "demo.spool")

    page = render(html_file, COUNTS)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-demo.png"
    shot.write_bytes(page.screenshot)
    shutil.copyfile(html_file, ARTIFACTS / "report-demo.html")
    assert page.screenshot.startswith(b"\x89PNG\r\n\x1a\n")
    assert page.console_errors == []
    assert page.requests == [html_file.resolve().as_uri()]
    shown = json.loads(page.evaluated)
    windows = [b for b in view["bindings"] if b["start_ms"] is not None]
    assert windows and len(windows) == len(view["bindings"])
    assert shown == {
        "processes": len(view["processes"]),
        "windows": len(windows),
        "events": sum(len(b["events"]) for b in windows),
        "phases": len(view["phases"]),
        "verdict": f"health {view['health']['verdict']}",
    }
    assert [len(b["events"]) for b in windows] == [b["kernel_event_count"] for b in windows]
