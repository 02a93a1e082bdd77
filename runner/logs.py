"""Runner logs through structlog, on stderr, never mixed into the command's output.

Text lines by default, on a terminal or not (in a container without `-t`,
under CI, piped): a person reads them beside the summary. JSON lines only
when asked (`--log-format json`: the daemon's unit, bench, the tests that
read the logs). Colours only on a terminal. Every string in a log line (argv, paths, error
text) goes through `runner.display.printable` first, whatever the renderer:
the command under observation names its own files and programs.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from runner.display import printable


def _printable(value: object) -> object:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    if isinstance(value, dict):
        return {printable(str(k)): _printable(v) for k, v in value.items()}
    return value


def escape_values(_logger: object, _method: str, event_dict: Mapping[str, object]) -> dict[str, object]:
    """structlog processor: every string value escaped for a terminal (runner/display.py)."""
    return {k: _printable(v) for k, v in event_dict.items()}


_settings: tuple[str, bool] | None = None
_applied = False


def configure_logging(fmt: str = "console", verbose: bool = False) -> None:
    """Choose the format ('console' or 'json'); structlog is set up at the first log line.

    As text only warnings show unless `verbose`: the person is watching
    their command's output, not ours. JSON (machines) gets info too.
    Deferred because importing structlog costs tens of milliseconds that the
    daemon client, which logs nothing on success, should not pay.
    """
    global _settings, _applied
    _settings, _applied = (fmt, verbose), False


_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "exception": 40,
           "critical": 50, "fatal": 50}
"""structlog's method names and their `logging` levels (a method not listed is never filtered here)."""


def _level(fmt: str, verbose: bool) -> int:
    """The lowest level that is shown."""
    return 20 if verbose or fmt == "json" else 30


def _discard(*_args: object, **_kwargs: object) -> None:
    """A log call below the shown level."""


def _apply(fmt: str, verbose: bool) -> None:
    import structlog

    level = _level(fmt, verbose)
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            escape_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


class Logger:
    """The logger of one component; structlog is imported and configured on its first use."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, method: str) -> Any:
        global _applied
        if _settings is not None and _LEVELS.get(method, 0) and _LEVELS[method] < _level(*_settings):
            return _discard  # what would be filtered out costs no structlog import (tens of ms)
        if not _applied and _settings is not None:
            _apply(*_settings)
            _applied = True
        import structlog

        return getattr(structlog.get_logger(component=self._name), method)


def get_logger(name: str) -> Logger:
    """A lazy logger for the component `name`.

    Lazy on purpose: modules create loggers at import, before
    `configure_logging` runs (and most runs of the client never log).
    """
    return Logger(name)
