"""The numbers and names the docs state, read from the docs' own sentences and compared with the
code that decides them, so a change to either that leaves the other behind fails here.

Each claim is a regular expression over a page's prose (whitespace folded, so a reflowed
paragraph still matches) whose groups are the stated figures; a sentence reworded past its
pattern fails too, and then the pattern moves with it.
"""

from __future__ import annotations

import ast
import os
import re
import struct
import tomllib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

import assay_sdk
import blackbox.evaluate
import ebpf.bpfobject
import ebpf.monitor
import ebpf.probing
import ebpf.ringsink
import ebpf.wire
import normalizer.build
import normalizer.deflate
import normalizer.layer_digest
import normalizer.surface
import policy.model
import probe_harness.emit
import runner.blackbox.observe
import runner.capture.limits
import runner.capture.live_process
import runner.capture.phases
import runner.capture.terminal
import runner.daemon.config
import runner.errors
import runner.evidence.bounded
import runner.evidence.capdiff
import runner.evidence.clock
import runner.evidence.docstream
import runner.evidence.intact
import runner.evidence.lines
import runner.evidence.publish
import runner.evidence.validate
import spool.format
from normalizer import blocks
from policy.load import load_preset
from policy.model import resolve

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
ARCH = "docs/architecture.md"


@cache
def prose(page: str) -> str:
    """A page's text with every run of whitespace (line breaks, indents) folded to one space."""
    return " ".join((ROOT / page).read_text(encoding="utf-8").split())


def stated(page: str, pattern: str) -> tuple[str, ...]:
    """The groups of the one sentence of `page` that `pattern` matches (each claim is made once)."""
    found = list(re.finditer(pattern, prose(page)))
    assert len(found) == 1, f"{page}: {len(found)} matches of {pattern!r}"
    return found[0].groups()


@cache
def header_defines() -> dict[str, int]:
    """The integer `#define`s of ebpf/assay_events.h, the kernel side's own copy."""
    text = (ROOT / "ebpf" / "assay_events.h").read_text()
    return {m[1]: int(m[2]) for m in re.finditer(r"^#define (\w+) (\d+)\b", text, re.MULTILINE)}


def hypothesis_examples(profile: str) -> int:
    """`max_examples` of a Hypothesis profile registered in tests/conftest.py."""
    text = (ROOT / "tests" / "conftest.py").read_text()
    match = re.search(rf'register_profile\("{profile}", max_examples=(\d+)', text)
    assert match, profile
    return int(match[1])


def sdk_pin_version() -> str:
    """The pinned OpenAI Agents SDK version (fixtures/agent/sdk_pin.py, not a package)."""
    match = re.search(r'^SDK_VERSION = "([^"]+)"', (ROOT / "fixtures" / "agent" / "sdk_pin.py").read_text(),
                      re.MULTILINE)  # fmt: skip
    assert match
    return match[1]


def image_size_bound() -> int:
    """The image size tests/test_image.py fails at (a kernel test: its bound is read, not imported)."""
    match = re.search(r"assert size < ([\d_]+), size", (ROOT / "tests" / "test_image.py").read_text())
    assert match
    return int(match[1])


def probe_scripts() -> list[Path]:
    """The probe catalog: one script per probe in probes/."""
    return sorted((ROOT / "probes").glob("*.sh"))


def tracepoints_attached() -> int:
    """Enter programs in the monitor's C sources plus the exits `on_sys_exit` is attached to."""
    probes = sum((ROOT / "ebpf" / name).read_text().count("TRACEPOINT_PROBE(")
                 for name in ("monitor.c", "changes.c"))  # fmt: skip
    return probes + len(ebpf.monitor.JOINED_SYSCALLS)


# (page, pattern, what the code says the groups must be)
CLAIMS: list[tuple[str, str, Callable[[], tuple[object, ...]]]] = [
    # the C ring consumer's bound
    (ARCH, r"a drain pauses once (\d+) MiB is buffered \(`PAUSE_BYTES` in `ebpf/ringsink\.py`\)",
     lambda: (ebpf.ringsink.PAUSE_BYTES / MIB,)),
    (ARCH, r"the C consumer: at most (\d+) MiB before it hands them on",
     lambda: (ebpf.ringsink.PAUSE_BYTES / MIB,)),
    # the drain interval
    (ARCH, r"drains the ring buffer every (\d+) ms", lambda: (runner.capture.phases.POLL_MS,)),
    (ARCH, r"The runner also drains on a (\d+) ms timer", lambda: (runner.capture.phases.POLL_MS,)),
    (ARCH, r"\(`POLL_MS` = (\d+) ms\)", lambda: (runner.capture.phases.POLL_MS,)),
    # per-run limits
    ("README.md", r"`--pids-max N` \(default (\d+)\)", lambda: (runner.capture.limits.DEFAULT_PIDS_MAX,)),
    (ARCH, r"`pids\.max` (\d+) by default", lambda: (runner.capture.limits.DEFAULT_PIDS_MAX,)),
    ("docs/daemon.md", r"Without a config the limits are (\d+) pids and (\d+) GiB of memory per run",
     lambda: (runner.capture.limits.DEFAULT_PIDS_MAX,
              runner.daemon.config.memory_bytes(runner.daemon.config.DEFAULT_MEMORY_MAX) / (1 << 30))),
    ("docs/daemon.md", r"`sensor\.ringbuf_pages` in the config \(default (\d+) pages, (\d+) MiB",
     lambda: (runner.daemon.config.DAEMON_RINGBUF_PAGES,
              runner.daemon.config.DAEMON_RINGBUF_PAGES * 4096 / MIB)),
    # the wire format and the kernel side's bounds
    (ARCH, r"The (\d+)-byte header carries the run key",
     lambda: (struct.calcsize(ebpf.wire.HEADER.format),)),
    (ARCH, r"counted per run slot \(key % (\d+),",
     lambda: (same(ebpf.wire.RUN_SLOTS, header_defines()["RUN_SLOTS"]),)),
    (ARCH, r"\(up to (\d+) entries, (\d+) bytes each, (\d+) KiB in all;",
     lambda: (header_defines()["ARGV_MAX"], header_defines()["ASSAY_DATA_MAX"] - 1,
              header_defines()["ASSAY_PAYLOAD_MAX"] / 1024)),
    (ARCH, r"back to back \(payload up to (\d+) KiB\)",
     lambda: (header_defines()["ASSAY_PAYLOAD_MAX"] / 1024,)),
    (ARCH, r"the syscall in flight, ([\d,]+) slots;", lambda: (ebpf.monitor.TASKS_MAX,)),
    (ARCH, r"the minimum kernel \((\d+)\.(\d+): the ring buffer\)", lambda: ebpf.probing.MIN_KERNEL),
    (ARCH, r"a (\d+) MiB ring holds tens of thousands",
     lambda: (ebpf.wire.DEFAULT_RINGBUF_PAGES * 4096 / MIB,)),
    # the compiled-object cache
    (ARCH, r"The cache is `([^`]+)` \(or", lambda: (str(ebpf.bpfobject.CACHE_DIR),)),
    (ARCH, r"The newest (\d+) objects are kept", lambda: (ebpf.bpfobject.CACHE_KEEP,)),
    # the live pass, publishing and the surface
    (ARCH, r"never waited for longer than (\d+) s plus (\d+) µs per record",
     lambda: (runner.capture.live_process.RESULT_TIMEOUT_S,
              runner.capture.live_process.RESULT_S_PER_RECORD * 1e6)),
    (ARCH, r"switch interval is ([\d.]+) ms instead of 5 ms",
     lambda: (normalizer.layer_digest.SWITCH_INTERVAL * 1000,)),
    (ARCH, r"gathers them into (\d+) MiB chunks", lambda: (normalizer.layer_digest.CHUNK_BYTES / MIB,)),
    (ARCH, r"deflated by a fresh compressor at level (\d+)", lambda: (normalizer.deflate.LEVEL,)),
    (ARCH, r"`HELD_VALUES` = ([\d,]+) values", lambda: (normalizer.surface.HELD_VALUES,)),
    (ARCH, r"in msgpack frames of (\d+) values", lambda: (normalizer.surface.FRAME_VALUES,)),
    (ARCH, r"runs of one set are merged (\d+) at a time", lambda: (normalizer.surface.FAN_IN,)),
    (ARCH, r"encoded by msgspec ([\d,]+) at a time", lambda: (normalizer.surface.ENCODE_VALUES,)),
    (ARCH, r"spilled to a temp file every ([\d,]+) events", lambda: (normalizer.build.SPILL_EVERY,)),
    (ARCH, r"so it runs only up to (\d+) MiB of each",
     lambda: (runner.evidence.publish.VALIDATE_UP_TO / MIB,)),
    # tests and tools
    (ARCH, r"runs (\d+) derandomized examples per test", lambda: (hypothesis_examples("ci"),)),
    (ARCH, r"`deep` \(([\d,]+) examples\)", lambda: (hypothesis_examples("deep"),)),
    (ARCH, r"sends SIGTERM, then kills (\d+) s later", lambda: (runner.blackbox.observe.TERM_GRACE,)),
    # README, policy.md, daemon.md, blackbox.md, artifacts.md
    ("README.md", r"fewer than (\d+) rows get no live line", lambda: (runner.capture.terminal.MIN_ROWS,)),
    ("README.md", r"machine with Linux (\d+)\.(\d+) or later", lambda: ebpf.probing.MIN_KERNEL),
    ("README.md", r"\(`fchmodat2` before (\d+)\.(\d+), `close_range` before (\d+)\.(\d+)\)",
     lambda: (*ebpf.probing.SYSCALL_SINCE["fchmodat2"], *ebpf.probing.SYSCALL_SINCE["close_range"])),
    ("docs/policy.md", r"`MAX_NET_RULES = (\d+)` rule slots", lambda: (policy.model.MAX_NET_RULES,)),
    ("docs/policy.md", r"# validate and explain \(exit 0 valid, (\d) invalid, (\d) unreadable\)",
     lambda: (runner.errors.EXIT_CHECK_FAILED, runner.errors.EXIT_BAD_INPUT)),
    ("docs/daemon.md", r"connections still sending their request \(1 to (\d+);",
     lambda: (runner.daemon.config.MAX_CONNECTIONS_PER_USER,)),
    ("docs/daemon.md", r"\(16 MiB\), a power of two up to (\d+)",
     lambda: (runner.daemon.config.MAX_RINGBUF_PAGES,)),
    ("docs/daemon.md", r"live tasks tracked in all \((\d+) to (\d+)\)",
     lambda: (runner.daemon.config.MIN_TASKS_MAX, runner.daemon.config.MAX_TASKS_MAX)),
    ("docs/daemon.md", r"hold `tasks_max / limits\.max_concurrent_runs` of them \((\d+) by default;",
     lambda: (runner.daemon.config.ConfigDocument().sensor.tasks_max
              // runner.daemon.config.ConfigDocument().limits.max_concurrent_runs,)),
    ("docs/blackbox.md", r"\| output over (\d+) MiB with no emoji",
     lambda: (blackbox.evaluate.MAX_OUTPUT_BYTES / MIB,)),
    ("docs/artifacts.md", r"spilled as sorted runs past ([\d,]+) values",
     lambda: (normalizer.surface.HELD_VALUES,)),
    ("docs/artifacts.md", r"\| `manifest\.json` \| 1 MiB \| (\d+) entries of about 150 bytes",
     lambda: (runner.evidence.bounded.MAX_MEMBERS,)),
    ("docs/probes.md", r"cuts snippets at (\d+) characters and refuses a payload over (\d+) bytes",
     lambda: (probe_harness.emit.SNIPPET_MAX, probe_harness.emit.PAYLOAD_MAX_BYTES)),
    ("docs/blackbox.md", r"cut at (\d+) entries of (\d+) bytes \(`argv_complete: false`\)",
     lambda: (header_defines()["ARGV_MAX"], header_defines()["ASSAY_DATA_MAX"] - 1)),
    ("docs/blackbox.md", r"forwards to the agent \(a second one, (\d+) s later, kills",
     lambda: (runner.blackbox.observe.TERM_GRACE,)),
    ("docs/sdk.md", r"Each packet is one compact JSON object \(at most (\d+) KiB\)",
     lambda: (assay_sdk.MAX_PACKET / 1024,)),
    ("docs/sdk.md", r"Notes on the SDK \(([\d.]+)\) for whoever", lambda: (sdk_pin_version(),)),
    ("docs/benchmarks.md",
     r"over the full catalog \((\d+) probes x baseline and the three presets, (\d+) records\)",
     lambda: (len(probe_scripts()), 4 * len(probe_scripts()))),
    ("docs/benchmarks.md", r"3 compiles instead of (\d+)\.", lambda: (3 * len(probe_scripts()),)),
    ("docs/setup.md", r"`tests/test_image\.py` prints the size line and fails above (\d+) MB",
     lambda: (image_size_bound() / 1_000_000,)),
]


@pytest.mark.parametrize(("page", "pattern", "truth"), CLAIMS, ids=[f"{c[0]}:{c[1][:40]}" for c in CLAIMS])
def test_the_doc_states_what_the_code_does(page: str, pattern: str,
                                          truth: Callable[[], tuple[object, ...]]) -> None:
    said = stated(page, pattern)
    assert [_figure(s) for s in said] == [_figure(v) for v in truth()], (page, said)


def _figure(value: object) -> object:
    """A stated or coded figure as a float ("32,768", 32768 and 32768.0 are one figure), else as is."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"[\d,]+(\.\d+)?", value):
        return float(value.replace(",", ""))
    return value


def same(*copies: object) -> object:
    """The one value every copy of a constant has (the C header's and Python's must agree)."""
    assert len(set(copies)) == 1, copies
    return copies[0]


UNITS = {"bytes": 1, "MiB": MIB, "GiB": 1 << 30}


def sizes(text: str) -> list[int]:
    """Every "N unit" size in a table cell, in bytes ("1 GiB / 2 GiB" is two)."""
    found = re.findall(r"([\d,]+) (bytes|MiB|GiB)", text)
    return [int(n.replace(",", "")) * UNITS[unit] for n, unit in found]


def reading_limits() -> dict[str, str]:
    """artifacts.md's "Reading limits" table: limit -> value cell."""
    text = (ROOT / "docs" / "artifacts.md").read_text(encoding="utf-8")
    section = text[text.index("### Reading limits"):]
    table = section[:section.index("\n\n", section.index("| limit"))]
    rows = re.findall(r"^\| (.+?) \| (.+?) \| .+ \|$", table, re.MULTILINE)
    return dict(rows)


def test_the_reading_limits_table_is_the_bounded_readers_constants() -> None:
    limits, b = reading_limits(), runner.evidence.bounded
    assert sizes(limits["long-name / pax header"]) == [b.MAX_HEADER_BYTES]
    assert sizes(limits["`manifest.json`"]) == [b.MAX_MANIFEST_BYTES]
    undeclared = limits["a member the manifest does not declare (or before the manifest)"]
    assert sizes(undeclared) == [b.MAX_UNDECLARED_BYTES]
    assert sizes(limits["a JSON document member"]) == [b.MAX_DOCUMENT_BYTES]
    assert limits["a field of a streamed document that is not a list, or one list item"] == (
        f"{runner.evidence.docstream.MAX_VALUE_TOKENS} JSON tokens")
    held = limits["items of a correlation report's or health's list; "
                  "lines of the events, policy or SDK layer"]
    assert int(held.replace(",", "")) == runner.evidence.lines.MAX_HELD_LINES
    assert int(held.replace(",", "")) == runner.evidence.capdiff.MAX_HELD_ITEMS
    assert int(limits["problems listed per member and check"]) == runner.evidence.validate.MAX_PROBLEMS
    assert sizes(limits["any member / all members declared"]) == [b.MAX_MEMBER_BYTES, b.MAX_TOTAL_BYTES]
    assert sizes(limits["an NDJSON line"]) == [b.MAX_LINE_BYTES]
    assert sizes(limits["members held in memory"]) == [b.INLINE_BYTES, b.INLINE_DOCUMENT_BYTES]
    assert sizes(limits["zero bytes after the last tar member"])[-1] == runner.evidence.intact.MAX_TAIL_BYTES
    assert sizes(limits["a spool frame"]) == [spool.format.MAX_FRAME]


def test_the_daemon_config_example_shows_the_defaults() -> None:
    """docs/daemon.md's sample config marks `pids_max`, `memory_max` and the sensor's sizes as the
    defaults: they must be `ConfigDocument()`'s."""
    text = (ROOT / "docs" / "daemon.md").read_text(encoding="utf-8")
    block = re.search(r"## Operator config.*?```toml\n(.*?)```", text, re.DOTALL)
    assert block, "docs/daemon.md has no sample config"
    sample = tomllib.loads(block[1])
    defaults = runner.daemon.config.ConfigDocument()
    assert sample["limits"]["pids_max"] == defaults.limits.pids_max
    assert sample["limits"]["memory_max"] == defaults.limits.memory_max
    assert sample["sensor"]["ringbuf_pages"] == defaults.sensor.ringbuf_pages
    assert sample["sensor"]["tasks_max"] == defaults.sensor.tasks_max
    assert sample["limits"]["max_concurrent_runs"] == defaults.limits.max_concurrent_runs
    assert sample["limits"]["request_timeout_s"] == defaults.limits.request_timeout_s
    # the sample decodes strictly (a misspelt key fails), as the daemon decodes its config
    msgspec.convert(sample, runner.daemon.config.ConfigDocument)


def test_the_ring_callback_is_handed_to_libbpf_by_the_own_loader() -> None:
    """architecture.md: the C consumer is registered through `ebpf/loader.py`'s libbpf binding, not BCC."""
    assert "handed to libbpf's `ring_buffer__new` by `ebpf/loader.py` as the ring's callback" in prose(
        "docs/architecture.md")
    loader = (ROOT / "ebpf" / "loader.py").read_text()
    assert "ring_buffer__new(" in loader and "bcc" not in _imports(ROOT / "ebpf" / "loader.py")
    assert "registered through BCC" not in prose("docs/architecture.md")


def test_detaching_counts_over_a_hundred_tracepoints() -> None:
    assert "the monitor attaches over a hundred tracepoints" in prose("docs/architecture.md")
    assert tracepoints_attached() > 100


def test_only_opens_become_file_blocked() -> None:
    """policy.md: only a refused open is recorded as `file_blocked`; a refused unlink, mkdir, rename,
    link, truncate or exec under the same policy is a failed attempt, never a block."""
    assert "Only a refused open becomes a `file_blocked` line" in prose("docs/policy.md")
    readonly = resolve(load_preset("read-only"), workspace="/w", home="/h", tmpdir="/t")
    judge = blocks.FileBlockJudge(readonly, uid=0, dac={})

    def refused(hook: int, flags: int = 0) -> SimpleNamespace:
        event = SimpleNamespace(hook=hook, ret=-blocks.EACCES, a1=flags)
        return SimpleNamespace(item=SimpleNamespace(event=event), path="/w/f")

    assert judge.blocked_access(refused(ebpf.wire.HOOK_OPEN, os.O_WRONLY)) == "write"  # type: ignore[arg-type]
    for hook in (ebpf.wire.HOOK_UNLINK, ebpf.wire.HOOK_MKDIR, ebpf.wire.HOOK_RENAME, ebpf.wire.HOOK_LINK,
                 ebpf.wire.HOOK_TRUNCATE, ebpf.wire.HOOK_EXECVE):  # fmt: skip
        assert judge.blocked_access(refused(hook)) is None, hook  # type: ignore[arg-type]
    # the failed-attempt ids policy.md names are artifacts.md's
    assert stated("docs/policy.md", r"failed attempt's `event_<id>` line \((\d+)-(\d+)\)") == stated(
        "docs/artifacts.md", r"same id plus 100 \((\d+)-(\d+)\)")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_normalizer_does_only_the_io_its_docstring_names() -> None:
    """normalizer/__init__.py: no path opened; anonymous temp files only in the three modules it names."""
    docstring = " ".join((normalizer_init := ROOT / "normalizer" / "__init__.py").read_text().split())
    named = set(re.findall(r"`(\w+)\.py`", docstring))
    temp_users = {p.stem for p in (ROOT / "normalizer").glob("*.py") if "tempfile" in _imports(p)}
    assert named == temp_users == {"buckets", "surface", "layer_digest"}, (named, temp_users, normalizer_init)
    for path in (ROOT / "normalizer").glob("*.py"):
        assert not _imports(path) & {"subprocess", "urllib", "http", "bcc"}, path
        calls = {ast.unparse(node.func) for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call)}  # fmt: skip
        assert not calls & {"open", "os.open", "socket.socket", "os.unlink", "os.rename", "os.mkdir"}, path


def test_the_claim_reader_refuses_a_missing_or_repeated_sentence() -> None:
    with pytest.raises(AssertionError, match="0 matches"):
        stated(ARCH, r"pauses once (\d+) GiB")
    with pytest.raises(AssertionError, match="matches"):
        stated(ARCH, r"(MiB)")
    assert _figure("32,768") == _figure(32768) == 32768.0 and _figure("/var/x") == "/var/x"


REFERENCE = re.compile(r'(docs/[a-z-]+\.md)[,;:]? (?:section )?"([^"]{3,80})"')
SOURCES = ("*.md", "docs/*.md", "*/README.md", "ebpf/*", "normalizer/*.py", "spool/*.py", "policy/*.py",
           "runner/**/*.py", "blackbox/**/*.py", "probe_harness/*.py", "bench/*.py", "tests/*.py",
           "fixtures/agent/*.py", "scripts/*")  # fmt: skip


def anchors(page: str) -> str:
    """What a reference may name in `page`: its headings, bold lead-ins, list items and table rows."""
    return prose(page).replace("`", "").lower()


def dangling_references(text: str) -> list[str]:
    """Each `docs/X.md, "Section"` in `text` whose page has no heading, lead-in or row of that name."""
    found = []
    for page, title in REFERENCE.findall(" ".join(text.split())):
        if not (ROOT / page).is_file():
            found.append(f"{page} (no such page)")
            continue
        title = title.replace("`", "").lower()
        if not any(mark + title in anchors(page) for mark in ("# ", "**", "- ", "| ", "*")):
            found.append(f'{page}, "{title}"')
    return found


def test_every_section_a_doc_or_docstring_names_exists() -> None:
    here = Path(__file__).resolve()
    paths = sorted({p for pattern in SOURCES for p in ROOT.glob(pattern) if p.is_file() and p != here})
    assert len(paths) > 100
    dangling = {str(p.relative_to(ROOT)): d for p in paths
                if (d := dangling_references(p.read_text(encoding="utf-8", errors="replace")))}  # fmt: skip
    assert dangling == {}


def test_the_reference_check_finds_a_dangling_one() -> None:
    assert dangling_references('see docs/architecture.md, "Faults" and docs/policy.md "Syscalls"') == []
    assert dangling_references('docs/architecture.md, "No such\n section"') == [
        'docs/architecture.md, "no such section"']
    assert dangling_references('docs/nowhere.md, "Faults"') == ["docs/nowhere.md (no such page)"]


def test_the_pinned_clock_table_is_clock_env() -> None:
    """determinism.md's "The clock, pinned" table: exactly the variables and values `determinism` sets."""
    text = (ROOT / "docs" / "determinism.md").read_text(encoding="utf-8")
    section = text[text.index("### The clock, pinned"):]
    table = section[section.index("| variable"):section.index("\n\n", section.index("| variable"))]
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", table, re.MULTILINE))
    assert rows == runner.evidence.clock.CLOCK_ENV
