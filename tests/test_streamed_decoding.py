"""The streamed paths give the answers of the whole ones: documents, the sweep, kernel blocks.

Large members are decoded a token at a time (runner/evidence/docstream.py),
swept in windows (conformance/secrets.py) and checked a block of lines at a
time (runner/evidence/lines.py). Each is compared here with the path that
holds the whole member, on inputs large enough to take the streamed path.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import msgspec
import pytest

from normalizer.artifacts import CapabilitySurface, CorrelationReport
from runner.evidence import lines
from runner.evidence.conformance.base import KERNEL, Parsed
from runner.evidence.conformance.secrets import secret_problems, secret_problems_in_document
from runner.evidence.docstream import WHOLE_BYTES, DocumentError, StreamedList, decode_document

SURFACE = {"schema": "assay.runner.capability_surface.v0", "run_id": "r1", "filesystem_paths": [],
           "network_endpoints": [], "process_execs": [], "mcp_tools": [], "policy_decisions": []}
PATHS = [f"/work/dir{i // 100}/file{i:06d}.txt" for i in range(60_000)]


class Streamed:
    """A member as the bounded reader streams a large one (`chunks`), so it is never decoded whole."""

    def __init__(self, data: bytes, size: int = 1 << 16) -> None:
        self.data, self.size = data, size

    def chunks(self) -> Iterator[bytes]:
        for at in range(0, len(self.data), self.size):
            yield self.data[at:at + self.size]


def _big(**fields: object) -> bytes:
    data = msgspec.json.encode({**SURFACE, "filesystem_paths": PATHS, **fields}) + b"\n"
    assert len(data) > WHOLE_BYTES
    return data


def _whole_error(data: bytes, kind: type) -> str:
    with pytest.raises(msgspec.ValidationError) as whole:
        msgspec.json.decode(data, type=kind)
    return str(whole.value)


def test_a_large_surface_streams_to_the_same_values() -> None:
    data = _big()
    doc = decode_document(Streamed(data), CapabilitySurface)  # not bytes: never decoded whole
    assert isinstance(doc.filesystem_paths, StreamedList)
    assert len(doc.filesystem_paths) == len(PATHS)
    assert list(doc.filesystem_paths) == PATHS
    assert list(doc.filesystem_paths) == PATHS  # iterated again from the member
    assert list(doc.process_execs) == [] and doc.run_id == "r1"


@pytest.mark.parametrize("fields", [
    {"filesystem_paths": [*PATHS[:30_000], 7, *PATHS[30_000:]]},
    {"run_id": 5},
    {"extra": 1},
    {"schema": "something.else"},
], ids=["item-type", "scalar-type", "unknown-field", "literal"])
def test_a_large_document_fails_as_a_whole_decode_does(fields: dict[str, object]) -> None:
    data = _big(**fields)
    with pytest.raises(DocumentError) as streamed:
        decode_document(Streamed(data), CapabilitySurface)
    assert str(streamed.value) == _whole_error(data, CapabilitySurface)


def test_a_missing_field_fails_as_a_whole_decode_does() -> None:
    doc = {**SURFACE, "filesystem_paths": PATHS}
    del doc["run_id"]
    data = msgspec.json.encode(doc)
    with pytest.raises(DocumentError) as streamed:
        decode_document(Streamed(data), CapabilitySurface)
    assert str(streamed.value) == _whole_error(data, CapabilitySurface)


def test_malformed_json_and_oversized_values_are_one_line() -> None:
    data = _big()
    with pytest.raises(DocumentError, match="JSON is malformed"):
        decode_document(Streamed(data[:-100]), CapabilitySurface)
    nested = _big(run_id=[[0] * 10] * 1000)
    with pytest.raises(DocumentError, match=r"more than 4096 JSON tokens - at `\$.run_id`"):
        decode_document(Streamed(nested), CapabilitySurface)


def test_a_held_list_past_its_ceiling_is_refused() -> None:
    report = {"schema": "assay.runner.correlation_report.v0", "run_id": "r1", "status": "partial",
              "bindings": [], "ambiguities": [f"a{i}" for i in range(200_000)]}
    data = Streamed(msgspec.json.encode(report))
    with pytest.raises(DocumentError, match=r"200000 items, more than the 1000 this reader holds - at "
                                            r"`\$.ambiguities`"):
        decode_document(data, CorrelationReport, held=1000)
    assert len(decode_document(data, CorrelationReport, held=200_000).ambiguities) == 200_000


@pytest.mark.parametrize("seed", range(4))
def test_the_windowed_sweep_finds_what_the_whole_sweep_finds(seed: int) -> None:
    """Secrets at random places in a large surface, the member cut into random chunks."""
    rng = random.Random(seed)
    paths = list(PATHS)
    for secret in ("AKIA" + "ABCDEFGHIJKLMNOP", "ghp_" + "a" * 40, "token=" + "x" * 12):
        paths[rng.randrange(len(paths))] += "/" + secret
    data = msgspec.json.encode({**SURFACE, "filesystem_paths": sorted(paths)})
    cuts = sorted(rng.sample(range(1, len(data)), 40))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    whole = [str(p) for p in secret_problems("capability-surface.json", data)]
    assert len(whole) == 3
    assert [str(p) for p in secret_problems_in_document("capability-surface.json", chunks)] == whole


def test_a_stretch_without_quotes_past_the_sweep_window_is_a_problem() -> None:
    chunks = [b'{"a":"' + b"x" * (5 << 20)]
    problems = [str(p) for p in secret_problems_in_document("capability-surface.json", chunks)]
    assert problems == ["capability-surface.json: more than 4194304 bytes without a '\"': too long a "
                        "string for the secret sweep to hold"]


LINE = (b'{"schema":"assay.runner.kernel_event.v0","run_id":"r1","seq":%d,"pid":%d,"event_type":1,'
        b'"kind":"openat","value":"/work/f%d","flags":0}')


def _layer(count: int, damage: dict[int, bytes]) -> bytes:
    return b"\n".join(damage.get(i, LINE % (i, i % 7, i % 50)) for i in range(count)) + b"\n"


DAMAGE = {
    "seq": {30_000: LINE % (30_005, 1, 1)},
    "rule": {35_000: LINE.replace(b'"flags":0', b'"flags":0,"access_mode":"write"') % (35_000, 1, 1)},
    "run-id": {25_000: (LINE % (25_000, 1, 1)).replace(b'"r1"', b'"r2"')},
    "undecodable": {15_000: b'{"schema":"assay.runner.kernel_event.v0","run_id":"r1","seq":15000,"pid":1,'},
    "blank-and-indented": {10_000: b"\n \n" + LINE % (10_000, 3, 3), 20_000: b"   " + LINE % (20_000, 1, 1)},
    "loader-telemetry": {32_000: (LINE % (32_000, 1, 1)).replace(b"/work/f1", b"/usr/lib/libc.so.6")},
    "none": {},
}


@pytest.mark.parametrize("case", DAMAGE, ids=list(DAMAGE))
def test_kernel_blocks_give_the_problems_and_facts_of_the_line_by_line_check(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    layer = Streamed(_layer(40_000, DAMAGE[case]))  # blocks of about 470 lines
    taken: list[bool] = []
    block = lines._Checker.block

    def spy(checker: lines._Checker, data: bytes, limit: int) -> bool:
        taken.append(block(checker, data, limit))
        return taken[-1]

    def run() -> tuple[list[str], list[str], tuple[int, ...]]:
        parsed = Parsed()
        parsed.saw_run_id("manifest.json", None, "r1")
        problems = [str(p) for p in lines.check_lines(KERNEL, layer, parsed)]
        facts = parsed.kernel
        sets = (facts.count, facts.connects, facts.datagrams) if facts else ()
        values = sorted(facts.values.sorted_values("filesystem_paths")) if facts else []
        if facts:
            facts.close()
        return problems + [str(p) for p in parsed.run_id_problems], values, sets

    monkeypatch.setattr(lines._Checker, "block", spy)
    fast = run()
    assert taken.count(True) > 70, taken  # all but the damaged blocks took the short way
    monkeypatch.setattr(lines._Checker, "block", lambda *_: False)
    assert fast == run()
    assert bool(fast[0]) == (case not in ("none", "blank-and-indented"))
    assert len(fast[1]) == 50 + (case == "loader-telemetry")
