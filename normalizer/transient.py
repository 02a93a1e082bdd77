"""Transient random names: recognized from kernel evidence, recorded canonically.

Real tools pick random names for files they create and then rename away or
remove: git's `tmp_obj_XXXXXX`, mkstemp's six-character suffixes, CPython's
`*.pyc.<id>`, pip's and npm's temp directories. Recorded verbatim, every run
of a deterministic job looks different. A path is *transient* when both hold:

1. its last component matches a random-name template of `TEMPLATES` (the
   table documented in docs/determinism.md), and
2. the run itself created it (a successful create-mode open, mkdir, symlink,
   link or rename onto it) and, by the end of the run, it was removed or
   renamed away, with nothing of the run recreating it; or the run tried to
   create it and could not because its directory did not exist (git picks a
   random name before it makes the object directory, then picks another),
   so it never existed.

A name that is still there at the end is never transient, however random it
looks: an agent keeping `out-8f3a2c.json` is a real difference.

The random part of a transient name becomes `~N`, N numbered from 1 per
directory in creation order, where creation order is the canonical event
order (process number, thread rank, the thread's own syscall order), so the
numbers are the same in every run of a deterministic job. Paths below a
transient directory follow it. The raw names stay in the spool.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import lru_cache

from normalizer.classify import Classified
from normalizer.fsops import LINK_TO, MKDIR, MKNOD, RENAME_FROM, RENAME_TO, RMDIR, SYMLINK, UNLINK
from normalizer.order import content

O_CREAT = 0o100
O_EXCL = 0o200
ENOENT = 2
_CREATES = frozenset({MKDIR, MKNOD, SYMLINK, LINK_TO})
_REMOVES = frozenset({UNLINK, RMDIR})
_LIFE_EVENTS = _CREATES | _REMOVES | {RENAME_FROM, RENAME_TO}
"""Event types besides openat whose observation can change what is followed."""


@dataclass(frozen=True)
class Template:
    """One random-name family: `pattern` matches a whole name; group `rand` is the random part.

    `parent` (optional) must match the name of the directory holding it, for
    families whose names alone are too plain to claim (git's `t` + 6).
    """

    name: str
    pattern: re.Pattern[str]
    parent: re.Pattern[str] | None = None
    exclusive: bool = False
    """Only for files created with O_EXCL (mkstemp's signature): for shapes too plain to claim alone."""

    def random_span(self, path: str, exclusive: bool = True) -> tuple[int, int] | None:
        """Where the random part of `path`'s last component is, as offsets into `path`."""
        head, base = posixpath.split(path)
        return self.span_in(head, base, len(path) - len(base), exclusive)

    def span_in(self, head: str, base: str, offset: int, exclusive: bool) -> tuple[int, int] | None:
        """`random_span` of a path already split into `head` and `base` (at `offset`)."""
        if self.exclusive and not exclusive:
            return None
        m = self.pattern.fullmatch(base)
        if m is None:
            return None
        if self.parent is not None and not self.parent.fullmatch(posixpath.basename(head)):
            return None
        return offset + m.start("rand"), offset + m.end("rand")


_ALNUM6 = r"[A-Za-z0-9]{6}"
_PY8 = r"[a-z0-9_]{8}"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

TEMPLATES: tuple[Template, ...] = (
    Template("git-object", re.compile(rf"tmp_(?:obj|pack|idx|rev|mtimes)_(?P<rand>{_ALNUM6})")),
    Template("git-probe", re.compile(rf"t(?P<rand>{_ALNUM6})"), parent=re.compile(r"\.git")),
    Template("gcc", re.compile(rf"cc(?P<rand>{_ALNUM6})\.[A-Za-z0-9_.]+")),
    Template("ar", re.compile(rf"st(?P<rand>{_ALNUM6})")),
    Template("cpython-pyc", re.compile(r".+\.pyc\.(?P<rand>[0-9]+)")),
    Template("python-tempfile",
             re.compile(rf"(?:tmp|pip-[a-z-]+-|pytest-[a-z-]+-)(?P<rand>{_PY8})[A-Za-z0-9_.-]*")),
    Template("python-named-tempfile", re.compile(rf".+?(?P<rand>{_PY8})\.tmp")),
    Template("python-tempdir-probe", re.compile(rf"(?P<rand>{_PY8})")),
    Template("npm-cacache", re.compile(rf"(?P<rand>{_UUID}|{_ALNUM6})"), parent=re.compile(r"tmp")),
    Template("coreutils-mktemp", re.compile(r"tmp\.(?P<rand>[A-Za-z0-9]{10})")),
    Template("mkstemp", re.compile(rf".*?(?P<rand>{_ALNUM6})"), exclusive=True),
)
"""Checked in order; the first match names the random part. docs/determinism.md lists them."""

PLACEHOLDER = "~"
_ANY_TEMPLATE = re.compile("|".join(f"(?:{t.pattern.pattern.replace('(?P<rand>', '(')})" for t in TEMPLATES))
"""Every template's pattern as one alternation: a name none of them matches whole is not random,
whatever its directory, in one regex call instead of one per template (most names created are
plain: open_heavy's 1,100 creates, an agent's edits)."""


@lru_cache(maxsize=4096)
def random_span(path: str, exclusive: bool = True) -> tuple[int, int] | None:
    """The random part of `path`'s last component under the first matching template."""
    if _ANY_TEMPLATE.fullmatch(path, path.rfind("/") + 1) is None:
        return None
    return first_span(path, exclusive)


def first_span(path: str, exclusive: bool) -> tuple[int, int] | None:
    """`random_span` without its prefilter: each template in turn (tests/test_transient.py)."""
    head, base = posixpath.split(path)
    offset = len(path) - len(base)
    for template in TEMPLATES:
        span = template.span_in(head, base, offset, exclusive)
        if span is not None:
            return span
    return None


@dataclass
class _Life:
    """One candidate file or directory: where it was first created, and whether it exists now.

    A directory rename moves candidates below it: their new paths share the
    life, so the file is transient only if it is gone under every name.
    """

    created_by: tuple[Hashable, int]
    exists: bool = True


@dataclass
class TransientNames:
    """Follows candidate paths through the run in ring (causal) order.

    Ring order is what the kernel did, so "exists at the end" is read from
    it; numbering, which must be the same in every run, waits for the
    canonical order (`finish`).
    """

    _lives: dict[str, _Life] = field(default_factory=dict)
    _spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    _ancestors: Counter[str] = field(default_factory=Counter)
    """Directories holding candidate paths: a rename of one moves them."""

    _rename_from: str | None = None
    _stories: dict[str, list[tuple[Hashable, Classified]]] = field(default_factory=dict)
    """Per candidate, the lines about it or below it (with their threads): numbering by content."""

    @property
    def tracked(self) -> dict[str, _Life]:
        """The candidates followed so far (the same dict for the whole run: a hot loop reads it
        once and tests it for emptiness per event)."""
        return self._lives

    @staticmethod
    def inert(c: Classified) -> bool:
        """Would `observe(_, c)` change nothing while no candidate is tracked?

        True unless `c` is an open that creates (or tried to create) a name
        some template could call random: what it depends on is `c`'s shape
        alone, so the scan memoizes it with the shape (normalizer/scan.py).
        """
        if c.value is None:
            return True
        if c.event_type != 1:
            return c.event_type not in _LIFE_EVENTS
        if c.meta is None or not c.meta.flags & O_CREAT:
            return True
        if c.meta.status is not None and c.meta.return_value != -ENOENT:
            return True
        return random_span(c.value, bool(c.meta.flags & O_EXCL)) is None

    def observe(self, who: Hashable, c: Classified) -> None:
        """Follow one evidence candidate of thread `who` (ring order; telemetry included)."""
        if c.value is None:
            return
        source = self._rename_from if c.event_type == RENAME_TO else None
        self._follow(who, c)
        if self._lives:
            self._touched(who, c, c.value)
            if source is not None:  # a rename's destination tells what its source was
                self._touched(who, c, source)

    def _touched(self, who: Hashable, c: Classified, path: str) -> None:
        """Keep `c` in the life story of every candidate it is about: `path` or a directory above it.

        Walks down from the root and stops at the first directory that neither
        is a candidate nor holds one, so a line far from every candidate costs
        one lookup.
        """
        end = path.find("/", 1)
        while end != -1:
            prefix = path[:end]
            if prefix in self._lives:
                self._stories.setdefault(prefix, []).append((who, c))
            elif not self._ancestors[prefix]:
                return
            end = path.find("/", end + 1)
        if path in self._lives:
            self._stories.setdefault(path, []).append((who, c))

    def _follow(self, who: Hashable, c: Classified) -> None:
        """The lifecycle effect of one candidate (creations, removals, renames)."""
        assert c.value is not None
        kind = c.event_type
        if kind == 1:  # openat: a create-mode open made the file, or tried to
            if c.meta is not None and c.meta.flags & O_CREAT:
                exclusive = bool(c.meta.flags & O_EXCL)
                if c.meta.status is None:
                    self.created(c.value, who, c.order, exclusive)
                elif c.meta.return_value == -ENOENT:  # its directory was missing: it never existed
                    self.attempted(c.value, who, c.order, exclusive)
        elif kind in _CREATES:
            self.created(c.value, who, c.order)
        elif kind in _REMOVES:
            self.removed(c.value)
        elif kind == RENAME_FROM:
            self._rename_from = c.value
        elif kind == RENAME_TO and self._rename_from is not None:  # always right after its source
            self.renamed(self._rename_from, c.value, who, c.order)
            self._rename_from = None

    def created(self, path: str, who: Hashable, order: int, exclusive: bool = False) -> None:
        """The run made `path` (a file, directory or link) by thread `who`'s `order`-th event.

        `exclusive`: it was an O_EXCL open, as mkstemp makes its files.
        """
        life = self._lives.get(path)
        if life is not None:
            if not life.exists:
                life.exists = True
            return
        span = random_span(path, exclusive)
        if span is None:
            return
        self._track(path, span, _Life((who, order)))

    def _track(self, path: str, span: tuple[int, int], life: _Life) -> None:
        self._lives[path] = life
        self._spans[path] = span
        for parent in _parents(path):
            self._ancestors[parent] += 1

    def attempted(self, path: str, who: Hashable, order: int, exclusive: bool = False) -> None:
        """The run tried to create `path` where it could not exist (mkstemp before its mkdir)."""
        if path not in self._lives:
            self.created(path, who, order, exclusive)
            self.removed(path)

    def removed(self, path: str) -> None:
        """`path` was unlinked or its directory removed."""
        life = self._lives.get(path)
        if life is not None:
            life.exists = False

    def renamed(self, src: str, dst: str, who: Hashable, order: int) -> None:
        """`src` became `dst`: `src` is gone, `dst` exists; candidates below a moved directory move too."""
        if self._ancestors[src]:
            prefix = src + "/"
            for path, life in list(self._lives.items()):
                moved = dst + path[len(src):]
                if life.exists and path.startswith(prefix) and moved not in self._lives:
                    start, end = self._spans[path]
                    shift = len(dst) - len(src)
                    self._track(moved, (start + shift, end + shift), life)
        self.removed(src)
        self.created(dst, who, order)

    def finish(self, rank: Callable[[Hashable], tuple[int, int]]) -> Substitution:
        """The canonical names, numbering transient paths per directory in a run-independent order.

        `rank` turns a thread (`who`) into its canonical position (process
        number, thread rank; rank 0 is the process's first thread). A name
        made by a process's first thread is numbered by when it was made in
        that thread's own order. A name made by another thread (a worker of a
        pool: which worker did which item is a race) comes after those, and
        is numbered by its story: the lines about it and below it, with every
        transient name masked as `~`, and where a first thread took part, that
        line's position (normalizer/order.py, docs/determinism.md). Two names
        with the same story are interchangeable: either numbering gives the
        same lines. One random string is one number in its directory (gcc's
        `ccX.cdtor.c` and `ccX.cdtor.o` share theirs).
        """
        gone = [(path, life) for path, life in self._lives.items() if not life.exists]
        masked = _rewrite([p for p, _ in gone], self._spans, lambda _: PLACEHOLDER)

        def story(path: str) -> tuple[tuple[int, tuple[int, ...], bytes], ...]:
            lines = []
            for who, c in self._stories.get(path, ()):
                position = rank(who)
                line = content(c, masked.apply)
                lines.append((0, (*position, c.order), line) if position[1] == 0 else (1, (), line))
            return tuple(sorted(lines))

        def key(item: tuple[str, _Life]) -> tuple[object, ...]:
            who, order = item[1].created_by
            process, thread_rank = rank(who)
            return (process, 0, order) if thread_rank == 0 else (process, 1, story(item[0]))

        gone.sort(key=key)
        numbers: dict[tuple[str, str], int] = {}
        per_dir: Counter[str] = Counter()

        def random_string(path: str) -> tuple[str, str]:
            return posixpath.dirname(path), path[slice(*self._spans[path])]

        for path, _ in gone:
            if random_string(path) not in numbers:
                per_dir[posixpath.dirname(path)] += 1
                numbers[random_string(path)] = per_dir[posixpath.dirname(path)]
        return _rewrite([p for p, _ in gone], self._spans,
                        lambda path: f"{PLACEHOLDER}{numbers[random_string(path)]}")


def _rewrite(paths: list[str], spans: dict[str, tuple[int, int]],
             label: Callable[[str], str]) -> Substitution:
    """Each path with its random part replaced by `label(path)`; paths below a rewritten one follow it."""
    substitution = Substitution({})
    for path in sorted(paths, key=lambda p: p.count("/")):  # parents first
        start, end = spans[path]
        head = posixpath.dirname(path)
        base = f"{path[len(head) + 1:start]}{label(path)}{path[end:]}"
        substitution.add(path, posixpath.join(substitution.apply(head), base))
    return substitution


class Substitution:
    """Rewrites values: a transient path, or anything below a transient directory."""

    def __init__(self, renames: dict[str, str]) -> None:
        self._renames = dict(renames)

    @property
    def count(self) -> int:
        """How many distinct transient paths the run had."""
        return len(self._renames)

    def renames(self) -> dict[str, str]:
        """Each transient path (raw, as the spool has it) -> its canonical form."""
        return dict(self._renames)

    def add(self, raw: str, canonical: str) -> None:
        self._renames[raw] = canonical

    def apply(self, value: str) -> str:
        """`value` with its longest transient prefix (whole path components) replaced."""
        if not self._renames:
            return value
        path = value
        while path and path != "/":
            new = self._renames.get(path)
            if new is not None:
                return new + value[len(path):]
            path = posixpath.dirname(path)
        return value

    def note(self) -> str | None:
        """The health note counting substitutions, when there were any."""
        return f"transient_names: substituted={self.count}" if self._renames else None


def _parents(path: str) -> list[str]:
    out = []
    head = posixpath.dirname(path)
    while head and head != "/":
        out.append(head)
        head = posixpath.dirname(head)
    return out
