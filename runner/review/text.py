"""`assay-runner show`: a `RunView` as plain text for a terminal.

Every string the observed command controlled (paths, endpoints, argv, tool
names and ids, decisions) goes through `printable`, so no byte of it can act
on the terminal.
"""

from __future__ import annotations

import shlex

from runner.display import printable as p
from runner.review.view import NOT_HOST_PATHS, PASSING_RULE, BindingEntry, ProcessEntry, RunView, exec_text


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} ms"


def _tree(processes: list[ProcessEntry]) -> list[str]:
    by_pid = {proc.pid: proc for proc in processes}
    lines: list[str] = []

    def walk(proc: ProcessEntry, depth: int) -> None:
        pad = "  " * depth
        ended = f", {proc.exit}" if proc.exit else ""
        if proc.paths_not_host:
            ended += f", {NOT_HOST_PATHS}"
        lines.append(f"  {pad}pid {proc.pid} ({proc.events} events{ended})")
        lines.extend(f"  {pad}  exec {p(exec_text(x))}" for x in proc.execs)
        for child in proc.children:
            walk(by_pid[child], depth + 1)

    for proc in processes:
        if proc.parent is None:
            walk(proc, 0)
    return lines


def _binding(b: BindingEntry) -> list[str]:
    window = "" if b.start_ms is None else f", window {_ms(b.start_ms)} .. {_ms(b.end_ms)}"
    lines = [f"  {p(b.tool_call_id)} {p(b.tool or '?')}: decision {p(b.policy_decision or 'none')}, "
             f"{b.kernel_event_count} kernel events{window}"]
    for e in b.events or []:
        detail = "/".join(x for x in (e.access_mode, e.status) if x)
        lines.append(f"    +{_ms(e.offset_ms)} pid {e.pid} {e.kind} {p(e.value or '')}"
                     + (f" ({detail})" if detail else ""))
    return lines


def render(view: RunView) -> str:
    """The whole review as text: summary, health, processes, files, endpoints, blocks, tool calls."""
    s, h = view.summary, view.health
    out = [f"run {p(s.run_id)} ({s.platform}): {view.archive}"]
    if s.command:
        out.append(f"  command: {p(shlex.join(s.command))}")
    out += [
        f"  {s.kernel_events} kernel events, {s.processes} processes, {s.files} files, "
        f"{s.endpoints} endpoints, {s.blocks} blocks, {s.tool_calls} tool calls"
        + (f", {_ms(s.duration_ms)}" if s.duration_ms is not None else ""),
        f"  correlation: {s.correlation}" + (f" ({', '.join(p(a) for a in s.ambiguities)})"
                                             if s.ambiguities else ""),
        f"  timeline: {view.timeline}",
        "",
        f"health: {h.verdict.upper()} (passing needs {PASSING_RULE})",
        f"  kernel_layer={h.kernel_layer} ringbuf_drops={h.ringbuf_drops} "
        f"cgroup_correlation={h.cgroup_correlation} policy_layer={h.policy_layer} sdk_layer={h.sdk_layer}",
        f"  network: {h.network_protocol_coverage} (endpoint claims: {h.network_endpoint_claim_scope})",
    ]
    out += [f"  failing: {f}" for f in h.failures]
    for note in h.notes:
        out += [f"  note {p(note.text)}", f"    means: {note.meaning}"]
    out += ["", "processes:", *_tree(view.processes)]
    out += ["", "files by directory:"]
    for group in view.directories:
        out.append(f"  {p(group.directory)}/")
        for f in group.files:
            how = ",".join(f.access_modes + f.operation_flags) or "-"
            extra = "".join([f" failed={f.failed}" if f.failed else "",
                             f" BLOCKED({','.join(f.blocked)})" if f.blocked else ""])
            raw = f"  (raw: {p(f.raw_path)})" if f.raw_path else ""
            out.append(f"    {p(f.name)}  [{how}] opens={f.opens}{extra}{raw}")
    if view.transient_names:
        out += ["", "transient names (canonical in the archive <- raw in the spool):"]
        out += [f"  {p(t.canonical)}  <-  {p(t.raw)}" for t in view.transient_names]
    out += ["", "endpoints:"] + ([f"  {p(e.endpoint)}  {', '.join(e.kinds)} ({e.events})"
                                  for e in view.endpoints] or ["  none"])
    out += ["", "blocks:"] + ([
        f"  {b.kind} {p(b.target)}" + (f" ({b.access})" if b.access else "")
        + (f" -> {b.return_value}" if b.return_value is not None else "")
        + (f": in tool call {p(b.tool_call_id)}, decision {p(b.decision or 'none')} from {p(b.source or '?')}"
           if b.tool_call_id else ": outside every tool call (or no spool): no policy line")
        for b in view.blocks] or ["  none"])
    out += ["", "tool calls:"]
    for b in view.bindings:
        out += _binding(b)
    if not view.bindings:
        out.append("  none")
    out += ["", "phases:"]
    out += [f"  {p(ph.name)}" + (f"  +{_ms(ph.offset_ms)}" if ph.offset_ms is not None else "")
            for ph in view.phases]
    return "\n".join(out)
