"""`assay-runner report`: a `RunView` as one self-contained HTML file.

No script, no external resource: styles are inline and a Content Security
Policy forbids every fetch, so opening the file cannot reach the network.
Every string passes `printable` (control and reordering characters shown
as escapes) and then HTML escaping: an agent-chosen path like
`<script>` or `\\u202e` shows as text.

The timeline has two parts: the whole run on the runner clock (phases and
tool-call windows as marks), then each tool-call window stretched to full
width with the kernel events inside it placed at their capture times.
"""

from __future__ import annotations

import html
import shlex

from runner.display import printable
from runner.review.view import NOT_HOST_PATHS, PASSING_RULE, BindingEntry, ProcessEntry, RunView, exec_text

WIDTH = 960
"""Timeline drawing width in CSS pixels."""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #d8dce3}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
.verdict{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;color:#fff}
.pass{background:#1f7a3a}.fail{background:#b42318}.muted{color:#667085}
table{border-collapse:collapse;margin:4px 0 10px}
td,th{padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{font-weight:600;color:#475467}.tree,.tree ul{list-style:none;padding-left:18px;margin:2px 0}
.tree li{margin:3px 0}.tree .pid{font-weight:600}.blocked{color:#b42318;font-weight:600}
details{margin:4px 0}summary{cursor:default}svg text{font:11px system-ui,sans-serif}
.window{margin:10px 0 16px}.window h3{font-size:14px;margin:0 0 2px}
"""


def esc(text: str) -> str:
    """Agent-controlled text, safe inside HTML elements and attribute values."""
    return html.escape(printable(text), quote=True)


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} ms"


def _tree(processes: list[ProcessEntry]) -> str:
    by_pid = {p.pid: p for p in processes}

    def node(p: ProcessEntry) -> str:
        execs = "".join(f"<div><code>{esc(exec_text(x))}</code></div>" for x in p.execs) \
            or '<div class="muted">no exec recorded</div>'
        ended = f", {esc(p.exit)}" if p.exit else ""
        if p.paths_not_host:
            ended += f", {esc(NOT_HOST_PATHS)}"
        kids = "".join(node(by_pid[c]) for c in p.children)
        return (f'<li class="proc"><span class="pid">pid {p.pid}</span> '
                f'<span class="muted">{p.events} events{ended}</span>{execs}'
                + (f"<ul>{kids}</ul>" if kids else "") + "</li>")

    roots = "".join(node(p) for p in processes if p.parent is None)
    return f'<ul class="tree" id="process-tree">{roots}</ul>'


def _overview(view: RunView) -> str:
    """The whole run: phases as lines, tool-call windows as marks, on one axis."""
    span = max(view.summary.duration_ms or 0.0, 1e-3)
    rows = len(view.bindings)
    height = 46 + 22 * rows

    def x(ms: float) -> float:
        return 10 + (WIDTH - 20) * ms / span

    parts = [f'<line x1="10" y1="30" x2="{WIDTH - 10}" y2="30" stroke="#98a2b3"/>',
             '<text x="10" y="44" fill="#667085">0 ms</text>',
             f'<text x="{WIDTH - 10}" y="44" text-anchor="end" fill="#667085">{_ms(span)}</text>']
    for i, ph in enumerate(view.phases):
        if ph.offset_ms is None:
            continue
        anchor = "start" if x(ph.offset_ms) < WIDTH / 2 else "end"
        parts.append(f'<line class="phase" x1="{x(ph.offset_ms):.1f}" y1="14" x2="{x(ph.offset_ms):.1f}" '
                     f'y2="{height - 4}" stroke="#6941c6" stroke-dasharray="3 3"/>')
        parts.append(f'<text x="{x(ph.offset_ms) + (3 if anchor == "start" else -3):.1f}" '
                     f'y="{10 + 12 * (i % 2)}" text-anchor="{anchor}" fill="#6941c6">{esc(ph.name)}</text>')
    for row, b in enumerate(view.bindings):
        if b.start_ms is None or b.end_ms is None:
            continue
        y = 52 + 22 * row
        left, right = x(b.start_ms), max(x(b.end_ms), x(b.start_ms) + 4)
        color = "#b42318" if b.policy_decision == "deny" else "#1570ef"
        parts.append(f'<rect class="tool-window" x="{left:.1f}" y="{y - 10}" width="{right - left:.1f}" '
                     f'height="12" fill="{color}"/>')
        label = f"{b.tool_call_id} {b.tool or ''}"
        anchor = "end" if left > WIDTH * 0.7 else "start"
        tx = left - 4 if anchor == "end" else right + 4
        parts.append(f'<text x="{tx:.1f}" y="{y}" text-anchor="{anchor}">{esc(label)}</text>')
    return (f'<svg id="timeline-overview" width="{WIDTH}" height="{height}" role="img" '
            f'aria-label="run timeline">{"".join(parts)}</svg>')


def _window(b: BindingEntry) -> str:
    """One tool call's window at full width, its kernel events placed inside."""
    head = (f'<h3><code>{esc(b.tool_call_id)}</code> {esc(b.tool or "?")} '
            f'<span class="muted">decision {esc(b.policy_decision or "none")}, '
            f"{b.kernel_event_count} kernel events</span></h3>")
    if b.start_ms is None or b.end_ms is None or b.events is None:
        return f'<div class="window">{head}<p class="muted">no window times (no spool)</p></div>'
    span = max(b.end_ms - b.start_ms, 1e-6)
    parts = [f'<rect x="10" y="6" width="{WIDTH - 20}" height="14" fill="#eff4ff" stroke="#1570ef"/>',
             f'<text x="10" y="34" fill="#667085">{_ms(b.start_ms)}</text>',
             f'<text x="{WIDTH - 10}" y="34" text-anchor="end" fill="#667085">{_ms(b.end_ms)}</text>']
    rows = []
    for e in b.events:
        ex = 10 + (WIDTH - 20) * (e.offset_ms - b.start_ms) / span
        color = "#b42318" if e.kind.endswith("_blocked") else "#101828"
        parts.append(f'<line class="kernel-event" x1="{ex:.1f}" y1="3" x2="{ex:.1f}" y2="23" '
                     f'stroke="{color}" stroke-width="2"/>')
        detail = "/".join(x for x in (e.access_mode, e.status) if x)
        rows.append(f"<tr><td class='mono'>+{e.offset_ms - b.start_ms:.3f} ms</td><td>pid {e.pid}</td>"
                    f"<td>{esc(e.kind)}</td><td><code>{esc(e.value or '')}</code></td>"
                    f"<td>{esc(detail)}</td></tr>")
    table = f"<table>{''.join(rows)}</table>" if rows else '<p class="muted">no kernel events inside</p>'
    return (f'<div class="window">{head}<svg width="{WIDTH}" height="40">{"".join(parts)}</svg>'
            f"{table}</div>")


def _files(view: RunView) -> str:
    out = []
    for group in view.directories:
        rows = "".join(
            f"<tr><td><code>{esc(f.name)}</code></td><td>{esc(', '.join(f.access_modes) or '-')}</td>"
            f"<td>{esc(', '.join(f.operation_flags))}</td><td>{f.opens}</td><td>{f.failed or ''}</td>"
            f"<td class='blocked'>{esc(', '.join(f.blocked))}</td></tr>" for f in group.files)
        out.append(f"<details open><summary><code>{esc(group.directory)}/</code> "
                   f"<span class='muted'>{len(group.files)} files</span></summary><table><tr><th>file</th>"
                   f"<th>access</th><th>flags</th><th>opens</th><th>failed</th><th>blocked</th></tr>"
                   f"{rows}</table></details>")
    return "".join(out) or '<p class="muted">none</p>'


def _table(head: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def render(view: RunView) -> str:
    """The complete HTML document."""
    s, h = view.summary, view.health
    ok = h.verdict == "passing"
    timeline = (_overview(view) + "".join(_window(b) for b in view.bindings)
                if view.spool else f'<p class="muted">{esc(view.timeline)}</p>'
                + "".join(_window(b) for b in view.bindings))
    phases = ", ".join(esc(p.name) for p in view.phases)
    endpoints = _table(["endpoint", "how", "events"], [
        [f"<code>{esc(e.endpoint)}</code>", esc(", ".join(e.kinds)), str(e.events)] for e in view.endpoints])
    blocks = _table(["kernel line", "target", "access", "tool call", "decision", "decided by"], [
        [esc(b.kind), f"<code>{esc(b.target)}</code>", esc(b.access or ""), esc(b.tool_call_id or "none"),
         esc(b.decision or "none"), esc(b.source or "")] for b in view.blocks])
    fields = _table(["field", "value"], [[k, esc(str(v))] for k, v in (
        ("kernel_layer", h.kernel_layer), ("ringbuf_drops", h.ringbuf_drops),
        ("cgroup_correlation", h.cgroup_correlation), ("policy_layer", h.policy_layer),
        ("sdk_layer", h.sdk_layer), ("network_protocol_coverage", h.network_protocol_coverage),
        ("network_endpoint_claim_scope", h.network_endpoint_claim_scope))])
    notes = "".join(f"<li><code>{esc(n.text)}</code><br><span class='muted'>{esc(n.meaning)}</span></li>"
                    for n in h.notes)
    command = f"<p><code>{esc(shlex.join(s.command))}</code></p>" if s.command else ""
    failing = "; failing: " + esc("; ".join(h.failures)) if h.failures else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>assay-runner report: {esc(s.run_id)}</title><style>{CSS}</style></head>
<body>
<h1>Run <code>{esc(s.run_id)}</code> <span id="verdict" class="verdict {'pass' if ok else 'fail'}">health \
{esc(h.verdict)}</span></h1>
{command}
<p class="muted">{s.kernel_events} kernel events, {s.processes} processes, {s.files} files,
{s.endpoints} endpoints, {s.blocks} blocks, {s.tool_calls} tool calls; correlation {esc(s.correlation)};
timeline: {esc(view.timeline)}. Archive <code>{esc(view.archive)}</code>.</p>
<h2>Process tree</h2>{_tree(view.processes)}
<h2>Timeline: runner phases and tool calls</h2>
<section id="timeline">{timeline}<p class="muted">phases in order: {phases}</p></section>
<h2>Files by directory</h2>{_files(view)}
<h2>Endpoints</h2>{endpoints}
<h2>Policy blocks and the decisions behind them</h2>{blocks}
<h2>Health: {esc(h.verdict)}</h2>
<p class="muted">passing needs {esc(PASSING_RULE)}{failing}</p>
{fields}<ul>{notes}</ul>
</body></html>
"""
