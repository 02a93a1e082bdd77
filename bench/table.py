"""Plain pipe tables: readable on a terminal and pasteable into Markdown docs."""

from __future__ import annotations

from collections.abc import Sequence


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown pipe table with padded columns."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def ratio(value: float | None) -> str:
    """A slowdown ratio as `1.23x`, or `n/a`."""
    return "n/a" if value is None else f"{value:.2f}x"


def seconds(value: float | None) -> str:
    """Seconds with millisecond precision, or `n/a`."""
    return "n/a" if value is None else f"{value:.3f}"
