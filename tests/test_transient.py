"""Transient random names (normalizer/transient.py) on recorded shapes of real tools.

Each sequence is what strace showed the tool doing (git, gcc, ar, CPython,
pip, npm, pytest; docs/determinism.md), in ring order; `rank` stands in for
the canonical (process, thread) position the normalizer passes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from normalizer.classify import Classified, OpenMeta
from normalizer.order import other_threads_order
from normalizer.transient import TEMPLATES, TransientNames, first_span, random_span

T = TypeVar("T")


def process_order(threads: list[tuple[T, Iterable[Classified]]],
                  rename: Callable[[str], str]) -> Iterator[tuple[T, Classified]]:
    """One process's lines in canonical order, as normalizer/build.py composes them: the first
    thread's (`threads` in rank order) as they came, then the others' by content."""
    first, events = threads[0]
    for c in events:
        yield first, c
    yield from other_threads_order(threads[1:], rename)


def rank(who: object) -> tuple[int, int]:
    """`who` is the first thread of process `who` (the worker-pool tests pass (process, rank))."""
    return (int(str(who)), 0)


def test_git_objects_are_numbered_per_directory_in_canonical_order() -> None:
    t = TransientNames()
    # ring order: thread 2's object lands first, but thread 1 is earlier canonically
    t.created(".git/objects/fa/tmp_obj_RWkgie", 2, 0)
    t.created(".git/objects/fa/tmp_obj_Gf9NDz", 1, 5)
    t.created(".git/objects/02/tmp_obj_JtvUTr", 1, 6)
    for p in ("fa/tmp_obj_RWkgie", "fa/tmp_obj_Gf9NDz", "02/tmp_obj_JtvUTr"):
        t.removed(f".git/objects/{p}")  # after link() to the object's real name
    s = t.finish(rank)
    assert s.apply(".git/objects/fa/tmp_obj_Gf9NDz") == ".git/objects/fa/tmp_obj_~1"
    assert s.apply(".git/objects/fa/tmp_obj_RWkgie") == ".git/objects/fa/tmp_obj_~2"
    assert s.apply(".git/objects/02/tmp_obj_JtvUTr") == ".git/objects/02/tmp_obj_~1"
    assert s.count == 3
    assert s.note() == "transient_names: substituted=3"


def test_same_job_different_random_names_give_the_same_values() -> None:
    def run(names: list[str]) -> list[str]:
        t = TransientNames()
        for i, n in enumerate(names):
            t.created(f"/tmp/{n}.s", 1, i, exclusive=True)
            t.removed(f"/tmp/{n}.s")
        s = t.finish(rank)
        return [s.apply(f"/tmp/{n}.s") for n in names]

    assert run(["ccAbC123", "ccXyZ789"]) == run(["cc63x0CJ", "ccMWleYC"]) == ["/tmp/cc~1.s", "/tmp/cc~2.s"]


def test_a_random_name_that_persists_is_never_transient() -> None:
    t = TransientNames()
    t.created("/work/out-8f3a2c.json", 1, 0)
    assert t.finish(rank).apply("/work/out-8f3a2c.json") == "/work/out-8f3a2c.json"


def test_a_name_recreated_after_removal_persists() -> None:
    t = TransientNames()
    t.created("/repo/.git/tgOTK2R", 1, 0)
    t.removed("/repo/.git/tgOTK2R")
    t.created("/repo/.git/tgOTK2R", 1, 1)  # git's symlink probe reuses the name
    assert t.finish(rank).count == 0
    t.removed("/repo/.git/tgOTK2R")
    assert t.finish(rank).apply("/repo/.git/tgOTK2R") == "/repo/.git/t~1"


def test_mkstemp_shape_needs_an_exclusive_create() -> None:
    t = TransientNames()
    t.created("/tmp/pip-build-tracker-7wy0zay0/c666818e8a19fb99", 1, 0)  # O_TRUNC: a hash, not mkstemp
    t.removed("/tmp/pip-build-tracker-7wy0zay0/c666818e8a19fb99")
    t.created("/w/data.Xy12Zq", 1, 1, exclusive=True)
    t.removed("/w/data.Xy12Zq")
    s = t.finish(rank)
    assert s.apply("/tmp/pip-build-tracker-7wy0zay0/c666818e8a19fb99") == \
        "/tmp/pip-build-tracker-7wy0zay0/c666818e8a19fb99"
    assert s.apply("/w/data.Xy12Zq") == "/w/data.~1"


def test_created_and_removed_plain_names_keep_their_names() -> None:
    t = TransientNames()
    t.created("/work/notes.txt", 1, 0)
    t.removed("/work/notes.txt")
    assert t.finish(rank).count == 0


def test_git_probe_template_needs_a_git_directory() -> None:
    assert random_span("/repo/.git/tgOTK2R") is not None
    t = TransientNames()
    t.created("/work/tgOTK2R", 1, 0, exclusive=True)  # outside .git: only mkstemp's last six are random
    t.removed("/work/tgOTK2R")
    assert t.finish(rank).apply("/work/tgOTK2R") == "/work/t~1"
    t = TransientNames()
    t.created("/work/tgOTK2Rx", 1, 0, exclusive=True)
    t.removed("/work/tgOTK2Rx")
    assert t.finish(rank).apply("/work/tgOTK2Rx") == "/work/tg~1"


def test_paths_below_a_transient_directory_follow_it() -> None:
    t = TransientNames()
    t.created("/tmp/pip-unpack-2x1cslxa", 1, 0)
    t.created("/tmp/pip-unpack-2x1cslxa/demo_pkg-1.0-py3-none-any.whl", 1, 1)
    t.removed("/tmp/pip-unpack-2x1cslxa/demo_pkg-1.0-py3-none-any.whl")
    t.removed("/tmp/pip-unpack-2x1cslxa")
    s = t.finish(rank)
    assert s.apply("/tmp/pip-unpack-2x1cslxa/demo_pkg-1.0-py3-none-any.whl") == \
        "/tmp/pip-unpack-~1/demo_pkg-1.0-py3-none-any.whl"
    assert s.count == 1


def test_a_transient_file_inside_a_transient_directory() -> None:
    t = TransientNames()
    t.created("/tmp/tmpuk7rqxgf", 1, 0)
    t.created("/tmp/tmpuk7rqxgf/tmpab_cd123", 1, 1)
    t.removed("/tmp/tmpuk7rqxgf/tmpab_cd123")
    t.removed("/tmp/tmpuk7rqxgf")
    s = t.finish(rank)
    assert s.apply("/tmp/tmpuk7rqxgf/tmpab_cd123") == "/tmp/tmp~1/tmp~1"


def test_a_directory_renamed_into_place_is_transient_but_its_target_is_not() -> None:
    t = TransientNames()
    t.created("/w/pytest-cache-files-g03ztrjt", 1, 0)
    t.created("/w/pytest-cache-files-g03ztrjt/README.md", 1, 1)
    t.renamed("/w/pytest-cache-files-g03ztrjt", "/w/.pytest_cache", 1, 2)
    s = t.finish(rank)
    assert s.apply("/w/pytest-cache-files-g03ztrjt/README.md") == "/w/pytest-cache-files-~1/README.md"
    assert s.apply("/w/.pytest_cache/README.md") == "/w/.pytest_cache/README.md"


def test_a_candidate_moved_with_its_directory_still_exists() -> None:
    t = TransientNames()
    t.created("/w/a/tmpab_cd123", 1, 0)
    t.renamed("/w/a", "/w/b", 1, 1)
    assert t.finish(rank).count == 0  # /w/b/tmpab_cd123 is still there: a kept random name
    t.removed("/w/b/tmpab_cd123")
    s = t.finish(rank)  # gone under its new name too: transient under both
    assert (s.apply("/w/a/tmpab_cd123"), s.apply("/w/b/tmpab_cd123")) == ("/w/a/tmp~1", "/w/b/tmp~1")


def test_gcc_companion_files_share_their_number() -> None:
    t = TransientNames()
    for i, p in enumerate(("/tmp/ccQx1Zab.cdtor.c", "/tmp/ccQx1Zab.cdtor.o", "/tmp/ccRr2Ycd.res")):
        t.created(p, 1, i)
        t.removed(p)
    s = t.finish(rank)
    assert [s.apply(p) for p in ("/tmp/ccQx1Zab.cdtor.c", "/tmp/ccQx1Zab.cdtor.o", "/tmp/ccRr2Ycd.res")] == \
        ["/tmp/cc~1.cdtor.c", "/tmp/cc~1.cdtor.o", "/tmp/cc~2.res"]


@pytest.mark.parametrize(("path", "template", "random"), [
    ("/r/.git/objects/fa/tmp_obj_RWkgie", "git-object", "RWkgie"),
    ("/r/.git/tgOTK2R", "git-probe", "gOTK2R"),
    ("/tmp/cc63x0CJ.s", "gcc", "63x0CJ"),
    ("/w/stvL17uw", "ar", "vL17uw"),
    ("/w/__pycache__/m.cpython-311.pyc.140234", "cpython-pyc", "140234"),
    ("/tmp/pip-build-tracker-94x2xx35", "python-tempfile", "94x2xx35"),
    ("/tmp/tmpuk7rqxgf", "python-tempfile", "uk7rqxgf"),
    ("/v/site-packages/demo-1.0.dist-info/RECORDnfcvj0c_.tmp", "python-named-tempfile", "nfcvj0c_"),
    ("/tmp/o_pzgq5i", "python-tempdir-probe", "o_pzgq5i"),
    ("/c/_cacache/tmp/4d3cfb14-d068-455d-909f-5ec754f6493b", "npm-cacache",
     "4d3cfb14-d068-455d-909f-5ec754f6493b"),
    ("/c/_cacache/tmp/Y43Br6", "npm-cacache", "Y43Br6"),
    ("/tmp/tmp.AbCdEf1234", "coreutils-mktemp", "AbCdEf1234"),
    ("/w/data.Xy12Zq", "mkstemp", "Xy12Zq"),
])
def test_template_table(path: str, template: str, random: str) -> None:
    first = next(t for t in TEMPLATES if t.random_span(path) is not None)
    span = first.random_span(path)
    assert span is not None  # `first` was picked for having one
    start, end = span
    assert (first.name, path[start:end]) == (template, random)


NAME_PIECES = ["tmp_obj_", "tmp_", "t", "cc", "st", ".pyc.", "tmp", "tmp.", "pip-build-", "pytest-of-",
               ".tmp", "4d3cfb14-d068-455d-909f-5ec754f6493b", "RWkgie", "uk7rqxgf", "AbCdEf1234", "140234",
               "_", "-", ".", "é", "/", "/.git/", "/tmp/"]


@given(st.lists(st.sampled_from(NAME_PIECES) | st.text(max_size=4), max_size=6).map("".join), st.booleans())
def test_the_template_prefilter_never_clears_a_random_name(path: str, exclusive: bool) -> None:
    """random_span's one-regex prefilter answers as every template tried in turn."""
    assert random_span.__wrapped__(path, exclusive) == first_span(path, exclusive)


def test_a_create_attempt_in_a_missing_directory_is_transient() -> None:
    t = TransientNames()
    t.attempted("/r/.git/objects/7f/tmp_obj_SFTOzP", 1, 0)  # ENOENT: objects/7f not made yet
    t.created("/r/.git/objects/7f/tmp_obj_Ab12Cd", 1, 2)
    t.removed("/r/.git/objects/7f/tmp_obj_Ab12Cd")
    s = t.finish(rank)
    assert s.apply("/r/.git/objects/7f/tmp_obj_SFTOzP") == "/r/.git/objects/7f/tmp_obj_~1"
    assert s.apply("/r/.git/objects/7f/tmp_obj_Ab12Cd") == "/r/.git/objects/7f/tmp_obj_~2"


# --- worker pools: which thread did which item is a race (normalizer/order.py) ---

CACHE = "/w/npm-cache/_cacache"
MAIN, W1, W2 = (1, 0), (1, 1), (1, 2)


def _open(path: str, order: int, flags: int = 0o1101) -> Classified:
    meta = OpenMeta(flags=flags, mode=0o644, resolve=None, return_value=None, access_mode="write",
                    operation_flags=("create",), status=None)
    return Classified(event_type=1, kind="openat", value=path, meta=meta, order=order, ts=order)


def _op(event_type: int, path: str, order: int) -> Classified:
    return Classified(event_type=event_type, kind=f"event_{event_type}", value=path, meta=None,
                      order=order, ts=order)


def _extract(rand: str) -> list[Callable[[int], list[Classified]]]:
    """cacache unpacking a tarball into a temp directory, then removing it (one work item)."""
    d = f"{CACHE}/tmp/{rand}"
    return [lambda o: [_op(124, d, o)], lambda o: [_open(f"{d}/package.json", o)],
            lambda o: [_op(120, f"{d}/package.json", o)], lambda o: [_op(121, d, o)]]


def _store(rand: str, digest: str) -> list[Callable[[int], list[Classified]]]:
    """cacache writing an object through a temp file renamed to its content address (one work item)."""
    tmp = f"{CACHE}/tmp/{rand}"
    return [lambda o: [_open(tmp, o, 0o1301)],
            lambda o: [_op(122, tmp, o), _op(123, f"{CACHE}/content-v2/sha512/{digest}", o)]]


def _run(items: dict[tuple[int, int], list[list[Callable[[int], list[Classified]]]]],
         interleave: list[tuple[int, int]]) -> list[tuple[str, str | None]]:
    """Feed the threads' steps in ring order `interleave`; the kernel lines in canonical order."""
    steps = {who: [step for item in work for step in item] for who, work in items.items()}
    per_thread: dict[tuple[int, int], list[Classified]] = {who: [] for who in (MAIN, W1, W2)}
    names = TransientNames()
    per_thread[MAIN].append(_open(f"{CACHE}/index-v5/lock", 0, 0o101))
    names.observe(MAIN, per_thread[MAIN][0])
    for order, who in enumerate(interleave, start=1):
        for c in steps[who].pop(0)(order):
            per_thread[who].append(c)
            names.observe(who, c)
    assert not any(steps.values())
    ranks: dict[Hashable, tuple[int, int]] = {who: who for who in per_thread}  # named by their rank
    s = names.finish(ranks.__getitem__)
    lines = process_order([(w, per_thread[w]) for w in (MAIN, W1, W2)], s.apply)
    return [(c.kind, s.apply(c.value) if c.value else None) for _, c in lines]


def test_a_worker_pool_gives_the_same_lines_whichever_worker_did_which_item() -> None:
    # run 1: worker 1 extracts, worker 2 stores two objects; run 2: the other way round, other names
    one = _run({W1: [_extract("aB3dE6")], W2: [_store("Qw1Er2", "ab/cd"), _store("Zx9Cv8", "ef/01")]},
               [W2, W1, W1, W2, W1, W2, W2, W1])
    two = _run({W1: [_store("Lk7Jh6", "ef/01"), _store("Po0Iu9", "ab/cd")], W2: [_extract("Mn5Bv4")]},
               [W1, W1, W2, W2, W1, W2, W1, W2])
    assert one == two
    assert ("event_122", f"{CACHE}/tmp/~1") in one and ("event_124", f"{CACHE}/tmp/~3") in one
    rename = one.index(("event_122", f"{CACHE}/tmp/~1"))
    assert one[rename + 1] == ("event_123", f"{CACHE}/content-v2/sha512/ab/cd"), "a rename's pair stays whole"
    assert one[0] == ("openat", f"{CACHE}/index-v5/lock"), "the first thread keeps its place and order"


def test_items_with_the_same_story_are_interchangeable() -> None:
    # two extractions of the same tarball: either numbering gives the same lines
    one = _run({W1: [_extract("aB3dE6")], W2: [_extract("Qw1Er2")]}, [W1, W2, W2, W1, W1, W2, W2, W1])
    two = _run({W1: [_extract("Lk7Jh6")], W2: [_extract("Mn5Bv4")]}, [W2, W2, W1, W1, W2, W1, W1, W2])
    assert one == two
    assert sorted((v for k, v in one if k == "event_124"), key=str) == [f"{CACHE}/tmp/~1", f"{CACHE}/tmp/~2"]


def test_the_first_threads_order_is_kept_and_workers_follow_by_content() -> None:
    main = [_op(124, "/w/z", 0), _op(124, "/w/a", 1)]
    worker = [_op(124, "/w/y", 2), _op(122, "/w/y", 3), _op(123, "/w/b", 3), _op(124, "/w/c", 4)]
    lines = [(who, c.value) for who, c in process_order([(MAIN, main), (W1, worker)], lambda v: v)]
    assert lines == [(MAIN, "/w/z"), (MAIN, "/w/a"), (W1, "/w/y"), (W1, "/w/b"), (W1, "/w/c"), (W1, "/w/y")]
