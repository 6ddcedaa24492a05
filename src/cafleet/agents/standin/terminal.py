"""What the stand-in reads from and writes to its terminal: where an escape sequence ends
and the name a key is recorded under, and rows made visible (control characters in caret
notation) and wrapped as the real agents wrap them."""

from __future__ import annotations


def sequence_end(text: str, i: int) -> int | None:
    """Index after the escape sequence at ``text[i]`` (an ESC); None while it may still
    be arriving. A malformed sequence ends before the first byte that cannot belong."""
    n = len(text)
    if i + 1 == n:
        return None
    kind = text[i + 1]
    if kind == "\x1b":
        return i + 1  # the Escape key, followed by another sequence
    if kind == "O":  # SS3: ESC O <key>
        return i + 3 if i + 2 < n else None
    if kind != "[":
        return i + 2  # Alt-<key>
    j = i + 2
    while j < n and " " <= text[j] <= "?":  # parameters and intermediates
        j += 1
    if j == n:
        return None
    return j + 1 if "@" <= text[j] <= "~" else j


def key_name(sequence: str) -> str:
    if sequence == "\x1b":
        return "escape"
    return "esc" + "".join(ch if " " <= ch <= "~" else f"\\x{ord(ch):02x}" for ch in sequence[1:])


def control_name(ch: str) -> str:
    if ch == "\t":
        return "tab"
    if ch < " ":
        return "ctrl-" + chr(ord(ch) + 0x40).lower()
    return f"U+{ord(ch):04X}"


def visible(text: str) -> str:
    """``text`` with control characters shown in caret notation, so that echoing it can
    never drive this terminal."""
    return "".join(
        f"^{chr(ord(ch) ^ 0x40)}"
        if ch < " " or ch == "\x7f"
        else f"<U+{ord(ch):04X}>"
        if "\x80" <= ch <= "\x9f"
        else ch
        for ch in text
    )


def wrap(first: str, text: str, width: int) -> list[str]:
    """``first`` + ``text`` cut into rows of at most ``width`` columns; rows after the
    first start with two blanks (as claude and codex indent a wrapped message)."""
    import unicodedata

    rows, row, used = [], first, sum(_cells(ch, unicodedata) for ch in first)
    for ch in text:
        cells = _cells(ch, unicodedata)
        if used + cells > width:
            rows.append(row)
            row, used = "  ", 2
        row += ch
        used += cells
    rows.append(row)
    return rows


def _cells(ch: str, unicodedata) -> int:
    if unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1
