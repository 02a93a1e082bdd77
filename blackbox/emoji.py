"""Emoji detection without a dependency: Unicode's Emoji_Presentation set, plus VS16 sequences.

Characters that are emoji by default (Unicode emoji-data.txt: the
Emoji_Presentation=Yes BMP list, and outside the BMP the pictograph blocks
U+1F300..U+1FAFF plus the emoji of the older blocks), and any
other character followed by U+FE0F (emoji presentation selector, as in
U+2764 U+FE0F). Text symbols such as U+2713 CHECK MARK or (c) are not emoji.
"""

from __future__ import annotations

VS16 = "\ufe0f"
_BMP_PRESENTATION = (
    (0x231A, 0x231B), (0x23E9, 0x23EC), (0x23F0, 0x23F0), (0x23F3, 0x23F3), (0x25FD, 0x25FE),
    (0x2614, 0x2615), (0x2648, 0x2653), (0x267F, 0x267F), (0x2693, 0x2693), (0x26A1, 0x26A1),
    (0x26AA, 0x26AB), (0x26BD, 0x26BE), (0x26C4, 0x26C5), (0x26CE, 0x26CE), (0x26D4, 0x26D4),
    (0x26EA, 0x26EA), (0x26F2, 0x26F3), (0x26F5, 0x26F5), (0x26FA, 0x26FA), (0x26FD, 0x26FD),
    (0x2705, 0x2705), (0x270A, 0x270B), (0x2728, 0x2728), (0x274C, 0x274C), (0x274E, 0x274E),
    (0x2753, 0x2755), (0x2757, 0x2757), (0x2795, 0x2797), (0x27B0, 0x27B0), (0x27BF, 0x27BF),
    (0x2B1B, 0x2B1C), (0x2B50, 0x2B50), (0x2B55, 0x2B55),
)
_SMP = (
    (0x1F004, 0x1F004), (0x1F0CF, 0x1F0CF), (0x1F18E, 0x1F18E), (0x1F191, 0x1F19A),
    (0x1F1E6, 0x1F1FF), (0x1F201, 0x1F201), (0x1F21A, 0x1F21A), (0x1F22F, 0x1F22F),
    (0x1F232, 0x1F236), (0x1F238, 0x1F23A), (0x1F250, 0x1F251), (0x1F300, 0x1FAFF),
)
"""Outside the BMP: the emoji of the game, enclosed and flag blocks, then every pictograph block."""


def is_emoji(ch: str) -> bool:
    """Is this single character an emoji by default presentation?"""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in (_SMP if cp > 0xFFFF else _BMP_PRESENTATION))


def find_emojis(text: str) -> list[tuple[int, int, str]]:
    """(line, column, emoji) for each emoji, 1-based, in text order."""
    found: list[tuple[int, int, str]] = []
    for ln, line in enumerate(text.split("\n"), start=1):
        for col, ch in enumerate(line, start=1):
            nxt = line[col] if col < len(line) else ""
            if is_emoji(ch):
                found.append((ln, col, ch))
            elif nxt == VS16 and ch != VS16:
                found.append((ln, col, ch + VS16))
    return found
