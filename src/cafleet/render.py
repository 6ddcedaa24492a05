"""Text and JSON output shared by the commands.

Text output is for agents and people: short, one record per block, bodies truncated to
``CAFLEET_MAX_TEXT_LEN`` code points and made display-safe, so that no stored or remote
text can drive the reader's terminal or reorder what the reader sees: C0 and C1 controls
are shown as ``\\xNN`` escapes, and so are, as ``\\uNNNN``/``\\UNNNNNNNN``, every other
control or format character (bidi embeddings, overrides, isolates and marks, zero-width
space, BOM, soft hyphen, the invisible tag characters), lone surrogates and the line and
paragraph separators. ZWJ and ZWNJ stay: emoji sequences and several scripts need them.
JSON output is exact: one compact document, bodies untruncated.

Printable text costs one ``str.isprintable`` check after the C0/C1 table; only text with
something else not printable (a format character, a non-ASCII space) consults
``unicodedata``, imported then.
"""

from __future__ import annotations

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

ELLIPSIS = "…"

# Control characters other than newline and tab become visible escapes in text output.
_DISPLAY_SAFE = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0)) if c not in (0x09, 0x0A)}
# In a one-line field (a name, a table cell) newline and tab are escaped too.
_INLINE_SAFE = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0))}


def to_json(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def truncate(text: str, max_len: int) -> str:
    return text if len(text) <= max_len else text[:max_len] + ELLIPSIS


_KEPT_FORMAT = "\u200c\u200d"  # ZWNJ, ZWJ
_ESCAPED_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")


def escape(ch: str) -> str:
    """One character as the escape text output shows in its place."""
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _escaped(text: str, table: dict, kept: str) -> str:
    text = text.translate(table)
    if text.isprintable():
        return text
    rest = text
    for ch in kept:
        rest = rest.replace(ch, "")
    if rest.isprintable():
        return text
    import unicodedata

    extra = {
        ord(ch): escape(ch)
        for ch in set(rest)
        if not ch.isprintable() and ch not in _KEPT_FORMAT and unicodedata.category(ch) in _ESCAPED_CATEGORIES
    }
    return text.translate(extra) if extra else text


def display_safe(text: str) -> str:
    """A body as text output shows it: newlines and tabs kept, every other control or
    format character (bidi controls included) shown as an escape."""
    return _escaped(text, _DISPLAY_SAFE, "\n\t")


def inline(value) -> str:
    """A stored or remote value (a name, a description, a pane id, a path a host printed)
    as one display-safe line: every control and format character, newline and tab
    included, shown as an escape (``\\x1b``, ``\\u202e``); None as -."""
    return "-" if value is None else _escaped(str(value), _INLINE_SAFE, "")


def message_header(record: Mapping[str, Any]) -> str:
    return f"[msg {record['message_id']} | from:{record['from_member_id']} | {record['status_timestamp']}]"


def message_text(record: Mapping[str, Any], max_len: int) -> str:
    """Header line plus the truncated body, as poll/show/ack print a message."""
    return message_header(record) + "\n" + display_safe(truncate(record["text"], max_len))


def message_line(record: Mapping[str, Any], max_len: int) -> str:
    """One line per message (listen): newlines in the body shown as ⏎."""
    body = truncate(record["text"], max_len).replace("\r\n", "⏎").replace("\n", "⏎").replace("\r", "⏎")
    return message_header(record) + " " + display_safe(body)


def messages_text(records: Sequence[Mapping[str, Any]], max_len: int) -> str:
    return "\n\n".join(message_text(record, max_len) for record in records)


def table(rows: Sequence[Sequence[object]], headers: list[str]) -> str:
    """A plain left-aligned table; the last column is not padded. Every cell is shown
    through :func:`inline`, so a stored value can neither drive the terminal nor break a row."""
    cells = [headers, *([inline(value) for value in row] for row in rows)]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [str(value).ljust(widths[i]) if i < len(row) - 1 else str(value) for i, value in enumerate(row)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def dash(value) -> str:
    return "-" if value is None else str(value)
