"""Text and JSON output shared by the commands.

Text output is for agents and people: short, one record per block, bodies truncated to
``CAFLEET_MAX_TEXT_LEN`` code points (a notice is shown whole: :func:`shown_body`) and
made display-safe, so that no stored or remote text can drive the reader's terminal or
reorder what the reader sees: C0 and C1 controls are shown as ``\\xNN`` escapes, and so
are, as ``\\uNNNN``/``\\UNNNNNNNN``, every other control or format character (bidi
embeddings, overrides, isolates and marks, zero-width space, BOM, soft hyphen, the
invisible tag characters), lone surrogates and the line and paragraph separators. ZWJ and
ZWNJ stay: emoji sequences and several scripts need them. JSON output is exact: one
compact document, bodies untruncated.

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


NOTICE_START = "[cafleet notice "
"""How a notice's first line begins (``[cafleet notice <kind> <subject>]``,
:mod:`cafleet.broker.notices`). Only cafleet writes it: a message whose text has a line
that begins like it (:func:`notice_line`) is refused (:func:`cafleet.validation.not_a_notice`)."""

# "[cafleet notice" as :func:`notice_line` compares a line's start: what a reader takes for an
# opening bracket becomes "[", the letters a reader takes for l or i (1, |, I, i) become "l",
# 0 becomes "o"; spaces are gone.
_NOTICE_KEY = "[cafleetnotlce"
_IGNORED = "*_`~#"  # Markdown marks: a renderer hides them (`*[cafleet notice*`)
_ASCII_FOLD = str.maketrans(
    {
        **dict.fromkeys([chr(c) for c in range(0x21) if chr(c) not in "\n\r\x0b\x0c\x1c\x1d\x1e"] + ["\x7f"]),
        **dict.fromkeys(_IGNORED),
        **dict.fromkeys("({<", "["),
        **dict.fromkeys("i1|", "l"),
        "0": "o",
    }
)
# Non-ASCII letters a reader may take for one of "cafleet notice" (Cyrillic, Greek, Armenian,
# Latin small capitals), as the letter they pass for; accents are gone before (NFKD).
_LOOKALIKES = str.maketrans(
    {
        **dict.fromkeys("\u0430\u0251\u03b1", "a"),  # а ɑ α  # noqa: RUF003 lookalikes
        **dict.fromkeys("\u0441\u03f2\u1d04\u2ca5", "c"),  # с ϲ ᴄ ⲥ  # noqa: RUF003 lookalikes
        **dict.fromkeys("\u0435\u04bd\u03b5\u025b\u212e", "e"),  # е ҽ ε ɛ ℮  # noqa: RUF003 lookalikes
        **dict.fromkeys("\u0192\ua799", "f"),  # ƒ ꞙ  # noqa: RUF003 lookalikes
        **dict.fromkeys("\u0131\u0269\u03b9\u0456\u04cf\u01c0\u05c0", "l"),  # ı ɩ ι і ӏ ǀ ׀  # noqa: RUF003 lookalikes
        **dict.fromkeys("\u0578\u03b7\u043f", "n"),  # ո η п  # noqa: RUF003 lookalikes
        **dict.fromkeys("\u043e\u03bf\u0585\u1d0f", "o"),  # о ο օ ᴏ  # noqa: RUF003 lookalikes
        **dict.fromkeys("\u0442\u03c4", "t"),  # т τ
    }
)
_BLANKS = "\u115f\u1160\u3164\uffa0\u2800"  # Hangul fillers and the blank Braille cell: drawn as nothing


def notice_line(text: str) -> int | None:
    """The number (from 1) of the first line of ``text`` that begins, as a reader sees it,
    like a notice's header line (an opening bracket, then the words ``cafleet notice``), or
    None. Compared as a reader would read it: whitespace, control and format characters
    (zero-width ones, bidi controls), combining marks, blank fillers and the Markdown marks
    ``*_`~#`` are ignored wherever they are; case, compatibility forms (fullwidth ``［``),
    accents, any opening bracket (``(``, ``{``, ``<``, ``【``…) and letters that pass for
    those of the words (Cyrillic ``с``, ``а``, ``о``; ``1``, ``I`` or ``|`` for ``l``; ``0``
    for ``o``) are folded. A line that begins otherwise (``> [cafleet notice …]``, a
    mention mid-line) is not one.

    ASCII text costs two ``str`` calls (C speed) unless it holds the words; only other
    text consults ``unicodedata``, imported then, and reads each line's first few
    characters."""  # noqa: RUF002 - the lookalikes, named
    if text.isascii():
        folded = text.lower().translate(_ASCII_FOLD)
        if _NOTICE_KEY not in folded:
            return None
        for number, line in enumerate(folded.splitlines(), 1):
            if line.startswith(_NOTICE_KEY):
                return number
        return None
    import unicodedata

    def letters(ch: str) -> str:
        if ch.isascii():
            return ch.lower().translate(_ASCII_FOLD)
        shown = []
        for part in unicodedata.normalize("NFKD", ch).casefold():
            if part.isascii():
                shown.append(part.translate(_ASCII_FOLD))
            elif not (part.isspace() or part in _BLANKS or unicodedata.category(part) in ("Cc", "Cf", "Mn", "Me")):
                shown.append("[" if unicodedata.category(part) == "Ps" else part.translate(_LOOKALIKES))
        return "".join(shown)

    for number, line in enumerate(text.splitlines(), 1):
        head = line.lstrip()[:1]
        if not head or (head.isalnum() and head not in _BLANKS):
            continue  # a letter or a digit is never a bracket: the line is not one (the common case)
        seen = ""
        for ch in line:
            seen += letters(ch)
            if not _NOTICE_KEY.startswith(seen[: len(_NOTICE_KEY)]):
                break
            if len(seen) >= len(_NOTICE_KEY):
                return number
    return None


def message_header(record: Mapping[str, Any]) -> str:
    return f"[msg {record['message_id']} | from:{record['from_member_id']} | {record['status_timestamp']}]"


NOT_A_NOTICE = "(cafleet has no record of this as a notice: read it as a message from member {sender})"


def shown_body(record: Mapping[str, Any], max_len: int) -> str:
    """A message's body as text output shows it (before :func:`display_safe`).

    A notice (a record ``broker.notices.annotate`` marked: ``"notice"``, which only
    cafleet's own rows get) is shown whole: the dialog, its options and the command that
    answers it (its text is bounded where it is made). Any other body is cut to ``max_len``
    code points, and when what is shown has a line that begins like a notice's header (a
    message stored before sends refused that, or written by another program:
    :func:`notice_line`), a line saying it is none comes first."""
    text = record["text"]
    if "notice" in record:
        return text
    cut = truncate(text, max_len)
    if notice_line(cut) is None:
        return cut
    return NOT_A_NOTICE.format(sender=record["from_member_id"]) + "\n" + cut


def message_text(record: Mapping[str, Any], max_len: int) -> str:
    """Header line plus the body (:func:`shown_body`), as poll/show/wait print a message."""
    return message_header(record) + "\n" + display_safe(shown_body(record, max_len))


def message_line(record: Mapping[str, Any], max_len: int) -> str:
    """One line per message (listen): newlines in the body shown as ⏎."""
    body = shown_body(record, max_len).replace("\r\n", "⏎").replace("\n", "⏎").replace("\r", "⏎")
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
