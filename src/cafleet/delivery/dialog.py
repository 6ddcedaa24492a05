"""The dialog on a member's screen, as the Director's notice shows it and ``cafleet member
answer`` checks it (docs/delivery.md, "Notices in the Director's inbox").

A pane whose screen reads ``awaiting_user`` (:func:`cafleet.delivery.screen.classify`)
shows a dialog: its *visible text* is the last :data:`MAX_LINES` non-blank rows of the
screen, each with every control character, escape sequence, bidi control and other format
character removed and cut to :data:`MAX_LINE` code points (a dialog is drawn by the agent
from text its model chose, so it is untrusted). Its *options* are the rows shaped like
``1. Yes`` (with the agents' selection marks ``❯``, ``›``, ``▌``, ``>`` and frame bars
before it). Its *digest* is the first :data:`DIGEST_LEN` hex digits of the SHA-256 of that
visible text: the notice names it, and an answer is sent only while the screen still shows
a dialog with the same digest, so a key never answers a dialog that changed. Every reader
reads the same window, the last ``supervision.SCREEN_LINES`` (30) lines of the pane, so the
same screen always gives the same digest.

How each agent takes an option (:func:`keys_for`): the digit of the option; the stand-in
agent collects keys until Enter, so it gets the digit and Enter.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass

MAX_LINES = 16  # rows of the dialog shown in a notice and digested
MAX_LINE = 160  # code points of each row
DIGEST_LEN = 12
_MARKS = "❯›▌>│┃ \t"
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@dataclass(frozen=True)
class Dialog:
    lines: tuple[str, ...]  # the visible text, escaped and bounded
    options: tuple[tuple[int, str], ...]  # (number, label), as drawn
    digest: str

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def choices(self) -> str:
        return ", ".join(str(number) for number, _ in self.options) or "none"

    def as_json(self) -> dict:
        return {
            "text": self.text,
            "options": [{"number": n, "label": label} for n, label in self.options],
            "digest": self.digest,
        }


def clean(line: str, limit: int = MAX_LINE) -> str:
    """``line`` with control, bidi and other format characters removed, cut to ``limit``
    code points (a cut row ends with ``…``)."""
    out = []
    for ch in line:
        category = unicodedata.category(ch)
        if category == "Zs":
            out.append(" ")  # a no-break space reads as a blank
        elif ch not in _BIDI and category[0] not in "CZ":
            out.append(ch)
    kept = "".join(out)
    kept = kept.rstrip()
    return kept if len(kept) <= limit else kept[: limit - 1] + "…"


def read(agent: str, screen_text: str) -> Dialog | None:
    """The dialog on ``screen_text``, or None when the screen does not read awaiting_user."""
    from cafleet.delivery import screen

    if screen.classify(agent, screen_text) != screen.PaneState.AWAITING_USER:
        return None
    rows = [clean(row) for row in screen.screen_lines(screen_text)]
    rows = [row for row in rows if row.strip()][-MAX_LINES:]
    options = []
    seen = set()
    for row in rows:
        number, label = _option(row)
        if number is not None and number not in seen:
            seen.add(number)
            options.append((number, label))
    digest = hashlib.sha256("\n".join(rows).encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_LEN]
    return Dialog(tuple(rows), tuple(options), digest)


def _option(row: str) -> tuple[int | None, str]:
    stripped = row.lstrip(_MARKS)
    digits = ""
    for ch in stripped:
        if not ch.isascii() or not ch.isdigit():
            break
        digits += ch
    rest = stripped[len(digits) :]
    if not digits or len(digits) > 2 or not rest.startswith(". ") or not rest[2:].strip():
        return None, ""
    return int(digits), rest[2:].strip()


def keys_for(agent: str, choice: int) -> tuple[str, bool]:
    """(text to type, whether Enter follows) to pick option ``choice`` in ``agent``'s dialog."""
    return str(choice), agent == "standin"
