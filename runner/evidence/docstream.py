"""JSON document members decoded as streams: a list of any length costs no memory.

A document member (capability surface, correlation report, health) may be
as large as the reading cap (`bounded.MAX_DOCUMENT_BYTES`) and, declared
honestly, hold millions of short values: decoded whole, 60 MB of `"a",`
took over a gigabyte. Documents up to `WHOLE_BYTES` are still decoded
whole by msgspec (exact, and at most a few tens of MiB); a larger one is read
with ijson's C parser, one token at a time:

- every top-level field that is a list in the Struct is walked item by item,
  each item checked against the item type (msgspec, so the problem reads as
  msgspec's, with the item's path) and counted, never kept;
- every other field is built as a value of at most `MAX_VALUE_TOKENS` tokens
  (a scalar, or a small object), and the fields then go through the Struct
  (`msgspec.convert`): missing, unknown and mistyped fields fail as they would
  in a whole decode;
- the decoded Struct holds a `StreamedList` for each walked list: its length,
  and its items read again from the member each time it is iterated.

A caller that must hold a list (the correlation report's bindings are
grouped, the health notes compared) passes `held`: a document whose list
has more items is refused in one line naming the list and the count, so the
cost is bounded by the ceiling, not by the member. The first problem stops
the decode, as msgspec's does.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, TypeVar, get_args, get_origin

import ijson
import msgspec

from runner.evidence.bounded import INLINE_DOCUMENT_BYTES, ChunkedMember, member_chunks

WHOLE_BYTES = INLINE_DOCUMENT_BYTES
"""Documents up to this size are decoded whole (msgspec), larger ones streamed."""
MAX_VALUE_TOKENS = 4096
"""JSON tokens a field that is not a list, or one item of a list, may hold (a binding is about 20)."""
READ_BYTES = 1 << 16

S = TypeVar("S", bound=msgspec.Struct)


class DocumentError(ValueError):
    """The document does not decode as its Struct; the message is the first problem."""


class _ChunkFile(io.RawIOBase):
    """A member's bytes as a file for ijson, read a chunk at a time."""

    def __init__(self, member: ChunkedMember) -> None:
        self._chunks = iter(member_chunks(member))
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def _tokens(member: ChunkedMember) -> Iterator[tuple[str, Any]]:
    try:
        yield from ijson.basic_parse(_ChunkFile(member), buf_size=READ_BYTES, use_float=True)
    except ijson.JSONError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DocumentError(f"JSON is malformed: {first.removeprefix('b' + chr(39))}") from exc


_OPEN = {"start_map": "end_map", "start_array": "end_array"}


def _value(event: str, value: Any, tokens: Iterator[tuple[str, Any]], where: str) -> Any:
    """The value starting with (event, value), built from at most MAX_VALUE_TOKENS tokens."""
    if event not in _OPEN:
        return value
    builder = ijson.ObjectBuilder()
    builder.event(event, value)
    depth, count = 1, 1
    for event, value in tokens:
        count += 1
        if count > MAX_VALUE_TOKENS:
            raise DocumentError(f"a value of more than {MAX_VALUE_TOKENS} JSON tokens - at `{where}`")
        builder.event(event, value)
        depth += 1 if event in _OPEN else -1 if event in ("end_map", "end_array") else 0
        if depth == 0:
            return builder.value
    raise DocumentError(f"JSON is malformed: truncated - at `{where}`")


def _error(exc: msgspec.ValidationError, where: str) -> DocumentError:
    """msgspec's message for a part of the document, with the part's path."""
    message = str(exc)
    if " - at `$" in message:
        return DocumentError(message.replace(" - at `$", f" - at `{where}", 1))
    return DocumentError(f"{message} - at `{where}`")


def _list_fields(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """The Struct's list fields (by JSON name) and their item types."""
    fields = msgspec.structs.fields(kind)
    return {f.encode_name: get_args(f.type)[0] for f in fields if get_origin(f.type) is list}


def _items(member: ChunkedMember, name: str) -> Iterator[Any]:
    """The items of the top-level list `name`, read from the member by ijson's C parser (the
    document decoded before, so the path is a list: field names hold no dot)."""
    try:
        yield from ijson.items(_ChunkFile(member), f"{name}.item", buf_size=READ_BYTES, use_float=True)
    except ijson.JSONError as exc:  # the member changed since it decoded: it cannot, but say so
        raise DocumentError(f"{name}: no longer decodes: {exc}") from exc


class StreamedList:
    """A list field of a streamed document: its length, and its items read again when iterated
    (checked by the first decode; Struct items are converted again)."""

    def __init__(self, member: ChunkedMember, name: str, item: Any, size: int) -> None:
        self._member, self._name, self._item, self._size = member, name, item, size

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        convert = self._item is not str
        for item in _items(self._member, self._name):
            yield msgspec.convert(item, self._item) if convert else item

    def __repr__(self) -> str:
        return f"<{self._size} items of {self._name}>"


def _check_item(item: Any, item_type: Any, where: str) -> None:
    if item_type is str and type(item) is str:  # the surface's millions: no call for these
        return
    try:
        msgspec.convert(item, item_type)
    except msgspec.ValidationError as exc:
        raise _error(exc, where) from exc


def decode_document(member: ChunkedMember, kind: type[S], held: int | None = None) -> S:
    """`member` decoded strictly as `kind`, streamed when large (see the module's docstring);
    DocumentError with the first problem. With `held`, every list is a real list of at most
    that many items; without, a streamed document's lists are `StreamedList`s."""
    if isinstance(member, bytes) and len(member) <= WHOLE_BYTES:
        try:
            return msgspec.json.decode(member, type=kind)
        except (msgspec.MsgspecError, UnicodeDecodeError) as exc:  # msgspec: a str not UTF-8
            raise DocumentError(str(exc) or type(exc).__name__) from exc
    lists = _list_fields(kind)
    tokens = _tokens(member)
    event, value = next(tokens, ("end", None))
    fields: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    if event != "start_map":
        fields = _value(event, value, tokens, "$")
    else:
        for event, key in tokens:
            if event == "end_map":
                break
            event, value = next(tokens)
            if key in fields or key in sizes:
                raise DocumentError(f"Object has the field `{key}` twice - at `$`")
            if key not in lists or event != "start_array":
                fields[key] = _value(event, value, tokens, f"$.{key}")
                continue
            size = 0
            for event, value in tokens:
                if event == "end_array":
                    break
                where = f"$.{key}[{size}]"
                _check_item(_value(event, value, tokens, where), lists[key], where)
                size += 1
            if held is not None and size > held:
                raise DocumentError(f"{size} items, more than the {held} this reader holds - at `$.{key}`")
            sizes[key] = size
    for _ in tokens:  # ijson refuses trailing content here
        pass
    try:
        doc = msgspec.convert({**fields, **{key: [] for key in sizes}}, kind)
    except msgspec.ValidationError as exc:
        raise DocumentError(str(exc)) from exc
    streamed = {key: StreamedList(member, key, lists[key], size) for key, size in sizes.items()}
    if held is not None:
        return msgspec.structs.replace(doc, **{key: list(items) for key, items in streamed.items()})
    return msgspec.structs.replace(doc, **streamed)
