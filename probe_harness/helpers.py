"""`json-extract` and `paging-stress`: the helpers fencerunner's probes call as `${repo_root}/bin/NAME`.

Upstream ships them as Rust binaries; these are the same command lines, exit
codes and output, so its probes run here unchanged (`bin/` dispatches to
them). `json-extract` prints the JSON value at a pointer (`--file F` or
`--stdin`, `--pointer /a/b`, `--type T`, `--default JSON`), exit 1 with one
line on any failure. `paging-stress` touches `--megabytes` of memory
`--passes` times, sequentially or in a random order: exit 0 done, 1 bad
arguments, 2 internal error, 3 `--max-seconds` reached.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
PAGE = 4096
_MISSING = object()


class HelperError(ValueError):
    """Bad arguments or input; the message is the helper's one error line."""


def _options(argv: list[str], flags: set[str], switches: set[str]) -> dict[str, str]:
    """Flags with one value each, given at most once (upstream's parsers refuse repeats)."""
    out: dict[str, str] = {}
    it = iter(argv)
    for arg in it:
        if arg in switches:
            out[arg] = ""
        elif arg in flags:
            value = next(it, None)
            if value is None:
                raise HelperError(f"{arg} requires a value")
            out[arg] = value
        else:
            raise HelperError(
                f"unknown flag: {arg}" if arg.startswith("-") else f"unexpected argument: {arg}"
            )
    return out


def pointer_get(value: Any, pointer: str) -> Any:
    """RFC 6901: the value at `pointer` ('' is the whole document), or _MISSING."""
    if pointer == "":
        return value
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and (token == "0" or not token.startswith("0")):
            index = int(token)
            if index >= len(value):
                return _MISSING
            value = value[index]
        else:
            return _MISSING
    return value


def json_extract(argv: list[str], stdin: bytes) -> str:
    """The compact JSON text json-extract prints for `argv`."""
    opts = _options(argv, {"--file", "--pointer", "--type", "--default"}, {"--stdin"})
    if "--file" in opts and "--stdin" in opts:
        raise HelperError("--file/--stdin may only be provided once")
    pointer = opts.get("--pointer", "")
    if pointer and not pointer.startswith("/"):
        raise HelperError("--pointer must be empty (root) or start with '/'")
    kind = opts.get("--type")
    if kind is not None and kind not in TYPES:
        raise HelperError(f"unknown type '{kind}' (expected object|array|string|number|bool|null)")
    default: Any = _MISSING
    if "--default" in opts:
        try:
            default = json.loads(opts["--default"])
        except json.JSONDecodeError:
            raise HelperError(f"invalid JSON for --default: {opts['--default']}") from None
    if "--file" in opts:
        try:
            with open(opts["--file"], "rb") as fh:
                source = fh.read()
        except OSError:
            raise HelperError(f"input file not found: {opts['--file']}") from None
    else:
        source = stdin
    try:
        document = json.loads(source)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HelperError("failed to parse JSON input") from None
    found = pointer_get(document, pointer)
    if found is _MISSING or (kind is not None and not TYPES[kind](found)):
        if default is _MISSING:
            what = "not found in input" if found is _MISSING else f"is not of expected type {kind}"
            raise HelperError(f"value at pointer {pointer} {what}")
        found = default
    if kind is not None and not TYPES[kind](found):
        raise HelperError(f"output value does not match expected type {kind}")
    return json.dumps(found, separators=(",", ":"), ensure_ascii=False)


def _positive(text: str, flag: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise HelperError(f"{flag} must be a positive integer, got {text}")
    return int(text)


def paging_stress(argv: list[str]) -> int:
    """Touch the memory as asked; the exit code upstream's helper gives."""
    opts = _options(argv, {"--megabytes", "--passes", "--pattern", "--max-seconds"}, set())
    megabytes = _positive(opts.get("--megabytes", "8"), "--megabytes")
    passes = _positive(opts.get("--passes", "1"), "--passes")
    pattern = opts.get("--pattern", "sequential")
    if pattern not in ("sequential", "random"):
        raise HelperError(f"unsupported --pattern {pattern}; expected sequential or random")
    limit = _positive(opts["--max-seconds"], "--max-seconds") if "--max-seconds" in opts else None
    try:
        buffer = bytearray(megabytes << 20)
    except MemoryError:
        print("paging-stress: internal error: cannot allocate the buffer", file=sys.stderr)
        return 2
    pages = list(range(0, len(buffer), PAGE))
    if pattern == "random":
        random.Random(0).shuffle(pages)
    start = time.monotonic()
    for n in range(passes):
        for i, offset in enumerate(pages):
            buffer[offset] = (buffer[offset] + n + 1) & 0xFF
            if limit is not None and i % 256 == 0 and time.monotonic() - start >= limit:
                print(f"paging-stress: reached max-seconds ({limit}s)", file=sys.stderr)
                return 3
    return 0


def json_extract_main() -> int:
    """Console script `json-extract`."""
    try:
        stdin = b"" if "--file" in sys.argv[1:] else sys.stdin.buffer.read()
        print(json_extract(sys.argv[1:], stdin))
    except HelperError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def paging_stress_main() -> int:
    """Console script `paging-stress`."""
    try:
        return paging_stress(sys.argv[1:])
    except HelperError as exc:
        print(f"paging-stress: {exc}", file=sys.stderr)
        return 1
