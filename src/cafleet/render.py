"""Text and JSON output shared by the commands.

Text output is for agents and people: short, one record per block, bodies truncated to
``CAFLEET_MAX_TEXT_LEN`` code points and made display-safe (control characters shown as
``\\xNN`` escapes so a body can never drive the reader's terminal). JSON output is exact:
one compact document, bodies untruncated.
"""

from __future__ import annotations

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


def display_safe(text: str) -> str:
    return text.translate(_DISPLAY_SAFE)


def inline(value) -> str:
    """A stored value (a name, a description, a pane id) as one display-safe line: every
    control character, newline and tab included, shown as a ``\\xNN`` escape; None as -."""
    return "-" if value is None else str(value).translate(_INLINE_SAFE)


def message_header(record: dict) -> str:
    return f"[msg {record['message_id']} | from:{record['from_member_id']} | {record['status_timestamp']}]"


def message_text(record: dict, max_len: int) -> str:
    """Header line plus the truncated body, as poll/show/ack print a message."""
    return message_header(record) + "\n" + display_safe(truncate(record["text"], max_len))


def message_line(record: dict, max_len: int) -> str:
    """One line per message (listen): newlines in the body shown as ⏎."""
    body = truncate(record["text"], max_len).replace("\r\n", "⏎").replace("\n", "⏎").replace("\r", "⏎")
    return message_header(record) + " " + display_safe(body)


def messages_text(records: list[dict], max_len: int) -> str:
    return "\n\n".join(message_text(record, max_len) for record in records)


def table(rows: list[list[str]], headers: list[str]) -> str:
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
