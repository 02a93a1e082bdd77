"""`assay-runner show`: a `RunView` as plain text for a terminal.

Every string the observed command controlled (paths, endpoints, argv, tool
names and ids, decisions) goes through `printable`, so no byte of it can act
on the terminal.
"""

from __future__ import annotations

import shlex

from runner.display import printable as p
from runner.review.fold import capabilities, fold_execs, fold_files, how, lookup_text, silent, uniform
from runner.review.view import NOT_HOST_PATHS, PASSING_RULE, BindingEntry, ProcessEntry, RunView, exec_text


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} ms"


def _tree(processes: list[ProcessEntry], fold: bool) -> list[str]:
    by_pid = {proc.pid: proc for proc in processes}
    lines: list[str] = []

    def walk(proc: ProcessEntry, depth: int) -> None:
        if fold and silent(proc):
            for child in proc.children:
                walk(by_pid[child], depth)
            return
        pad = "  " * depth
        ended = f", {proc.exit}" if proc.exit else ""
        if proc.paths_not_host:
            ended += f", {NOT_HOST_PATHS}"
        lines.append(f"  {pad}pid {proc.pid} ({proc.events} events{ended})")
        lines.extend(f"  {pad}  exec {p(exec_text(x.exec))}{lookup_text(x)}"
                     for x in fold_execs(proc.execs, fold))
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


def _capabilities(view: RunView) -> list[str]:
    """What the command did that matters, first: programs, writes, reads, network, blocks."""
    c = capabilities(view)
    written = ", ".join(f"{p(d.rstrip('/'))}/ ({n})" for d, n in c.written.items())
    return [
        "capabilities:",
        f"  programs run ({len(c.programs)}): " + (", ".join(p(x) for x in c.programs) or "none"),
        f"  files written ({sum(c.written.values())}): " + (written or "none"),
        f"  files read: {c.read}",
        f"  network ({len(c.endpoints)}): " + (", ".join(p(e) for e in c.endpoints) or "none"),
        f"  policy blocks ({len(c.blocks)}): " + (", ".join(p(b) for b in c.blocks) or "none"),
    ]


def render(view: RunView, fold: bool = True) -> str:
    """The whole review as text: verdict and capabilities first, then health, processes, files,
    endpoints, blocks, tool calls; PATH lookups and files only looked for are folded unless not `fold`."""
    s, h = view.summary, view.health
    out = [f"run {p(s.run_id)} ({s.platform}): {view.archive}"]
    if s.command:
        out.append(f"  command: {p(shlex.join(s.command))}")
    out.append(f"health: {h.verdict.upper()} (passing needs {PASSING_RULE})")
    out += [f"  failing: {f}" for f in h.failures]
    out += _capabilities(view)
    out += [
        "",
        f"{s.kernel_events} kernel events, {s.processes} processes, {s.files} files, "
        f"{s.endpoints} endpoints, {s.blocks} blocks, {s.tool_calls} tool calls"
        + (f", command ran {s.duration_ms / 1000:.2f}s" if s.duration_ms is not None else ""),
        f"  correlation: {s.correlation}" + (f" ({', '.join(p(a) for a in s.ambiguities)})"
                                             if s.ambiguities else ""),
        f"  timeline: {view.timeline}",
        f"  kernel_layer={h.kernel_layer} ringbuf_drops={h.ringbuf_drops} "
        f"cgroup_correlation={h.cgroup_correlation} policy_layer={h.policy_layer} sdk_layer={h.sdk_layer}",
        f"  network: {h.network_protocol_coverage} (endpoint claims: {h.network_endpoint_claim_scope})",
    ]
    for note in h.notes:
        out += [f"  note {p(note.text)}", f"    means: {note.meaning}"]
    out += ["", "processes:", *_tree(view.processes, fold)]
    out += ["", "files by directory:"]
    directories, missing, in_dirs = fold_files(view.directories) if fold else (view.directories, 0, 0)
    for group in directories:
        if fold and (way := uniform(group)) is not None:
            out.append(f"  {p(group.directory)}/  [{way}]: {', '.join(p(f.name) for f in group.files)}")
            continue
        single = fold and len(group.files) == 1  # folded: a directory of one file is one line
        if not single:
            out.append(f"  {p(group.directory)}/")
        for f in group.files:
            extra = "".join([f" failed={f.failed}" if f.failed else "",
                             f" BLOCKED({','.join(f.blocked)})" if f.blocked else ""])
            raw = f"  (raw: {p(f.raw_path)})" if f.raw_path else ""
            name = p(f"{group.directory}/{f.name}") if single else f"  {p(f.name)}"
            out.append(f"  {name}  [{how(f)}] opens={f.opens}{extra}{raw}")
    if missing:
        out.append(f"  not found: {missing} file(s) in {in_dirs} director{'y' if in_dirs == 1 else 'ies'}, "
                   "only looked for (show --all lists them)")
    if view.transient_names and fold:
        out.append(f"  transient names: {len(view.transient_names)} (show --all lists them, raw names too)")
    elif view.transient_names:
        out += ["", "transient names (canonical in the archive <- raw in the spool):"]
        out += [f"  {p(t.canonical)}  <-  {p(t.raw)}" for t in view.transient_names]
    sections = {
        "endpoints:": [f"  {p(e.endpoint)}  {', '.join(e.kinds)} ({e.events})" for e in view.endpoints],
        "blocks:": [
            f"  {b.kind} {p(b.target)}" + (f" ({b.access})" if b.access else "")
            + (f" -> {b.return_value}" if b.return_value is not None else "")
            + (f": in tool call {p(b.tool_call_id)}, decision {p(b.decision or 'none')} from "
               f"{p(b.source or '?')}" if b.tool_call_id
               else ": outside every tool call (or no spool): no policy line")
            for b in view.blocks],
        "tool calls:": [line for b in view.bindings for line in _binding(b)],
    }
    for title, lines in sections.items():
        if lines or not fold:  # folded: an empty section is already said by the counts and capabilities
            out += ["", title, *(lines or ["  none"])]
    out += ["", "phases:"]
    out += [f"  {p(ph.name)}" + (f"  +{_ms(ph.offset_ms)}" if ph.offset_ms is not None else "")
            for ph in view.phases]
    return "\n".join(out)
