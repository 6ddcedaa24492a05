"""The dialog on a member's screen, as the Director's notice shows it and ``cafleet member
answer`` checks it (docs/delivery.md, "The dialog and its digest").

A pane whose screen reads ``awaiting_user`` (:func:`cafleet.delivery.keystrokes.screen.classify`)
shows a dialog. Every reader (the keeper's notice, ``member answer``, the WebUI's answer
buttons) reads the same window, :func:`capture`: the pane's whole visible screen, wrapped
rows joined, so every row of the dialog as drawn is in it, however tall the dialog.

Its *text* is every row of that screen, in full: no row cut, none left out (only the blank
rows above the first drawn row and below the last are dropped). A row loses the blanks
(U+0020) it ends with, which no screen shows; every character a screen does not draw as
itself is written as a visible escape, ``⟦U+200B⟧`` (:func:`shown`): controls, format
characters (zero-width space and joiners, bidi controls, BOM, soft hyphen, tags), every space
but U+0020 (a no-break space looks like one, yet a shell reads it as part of a word), line and
paragraph separators, private-use and unassigned code points, the other default-ignorable ones
(variation selectors, Hangul fillers) and the blank Braille cell; and ``⟦`` itself, so the
escaping is one-to-one: two screens that differ anywhere but in trailing blanks never have
the same text. A dialog is drawn by the agent from text its model chose, so it is untrusted:
its text cannot drive a terminal, reorder what a reader sees or hide a character.

Its *digest* is the first :data:`DIGEST_LEN` hex digits of the SHA-256 of exactly that text
(the rows joined by newlines): the notice names it, and an answer is sent only while the
screen still shows a dialog with the same digest, so a key never answers a dialog a reader
could tell apart from the one described (``rm -rf bu⟦U+200B⟧ild`` is not ``rm -rf build``;
a row that differs in its 170th character or a row far above the options is another dialog).

Its *options* are the dialog's own numbered list: rows drawn as ``1. Yes`` (after the
agents' selection marks ``❯``, ``›``, ``▌``, ``>`` and frame bars), the run ``1.``, ``2.``, …
that starts at the last row numbered 1 and whose last row has at most :data:`OPTIONS_TAIL`
drawn rows under it; so a numbered list in the transcript above a dialog is no option. An
option's *label* is its first column: its text up to the first run of two or more blanks
(the padding before a description column or a right frame bar), trailing frame bars removed,
escaped as the text is.

Some dialogs draw their options as a row of buttons without numbers (opencode's permission
prompt ``Allow once   Allow always   Reject`` and the ``Confirm   Cancel`` that follows
``Allow always``). Those rows are the agent's own, never the model's: :data:`BUTTONS` lists,
per agent, the exact sets of labels it draws. When the screen's last such row (again with at
most :data:`OPTIONS_TAIL` drawn rows under it) shows one of them, its buttons are the options,
numbered 1..N in screen order, left to right (``numbered`` is False): the notice, ``member
show`` and the WebUI show those numbers, and ``member answer`` takes them. Which button is
selected is drawn only in colour: read from a capture with its attributes (:func:`capture`
with ``marked``), the selected one is the button drawn on the colour of the dialog's frame bar
(opencode paints the selected button in its warning colour, the colour of the bar along the
dialog's left edge); ``selected`` is None when the screen does not tell exactly one.

How each agent takes an option: a numbered option by its digit (:func:`keys_for`; the
stand-in agent collects keys until Enter, so it gets the digit and Enter); a button by the
arrow keys that move the selection to it, then Enter (:func:`moves`; opencode: ``left`` and
``right``, and Enter confirms), sent only after the screen shows the chosen button selected
in the same dialog (docs/delivery.md, "Answering a blocked member").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

DIGEST_LEN = 12
OPTIONS_TAIL = 8  # drawn rows a dialog's last option may have under it (hints, footers, a frame)
ESCAPE_OPEN, ESCAPE_CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧: ⟦ starts every escape, and so is escaped itself
_MARKS = "❯›▌>│┃ \xa0"  # before an option's number: selection marks, frame bars, blanks
_FRAME = "│┃║▌▐ "  # after a label: padding and a right frame bar
# Default_Ignorable_Code_Point (Unicode 15.1, DerivedCoreProperties.txt), first and last of each
# range: drawn as nothing. Most are format or unassigned characters anyway; the rest are the
# variation selectors, combining grapheme joiner, Mongolian and Khmer marks and Hangul fillers.
_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_BLANK_GLYPHS = "\u2800"  # graphic characters drawn as a blank: the blank Braille cell
# Dialogs whose options are buttons without numbers: per agent, every set of labels it draws
# in one row (its own words, in screen order), and the arrow keys that move the selection
# (previous, next). Read from opencode 1.18.33: its permission prompt and the confirmation
# that follows "Allow always"; left/right (and h/l) move, Enter confirms, Escape rejects.
BUTTONS: dict[str, tuple[tuple[str, ...], ...]] = {
    "opencode": (("Allow once", "Allow always", "Reject"), ("Confirm", "Cancel")),
}
ARROWS: dict[str, tuple[str, str]] = {"opencode": ("left", "right")}
_BARS = "┃│▌"  # a dialog's frame bar, whose colour marks the selected button


@dataclass(frozen=True)
class Dialog:
    lines: tuple[str, ...]  # every row of the screen, in full, escaped (:func:`shown`)
    options: tuple[tuple[int, str], ...]  # (number, label): as drawn, or buttons numbered 1..N
    digest: str
    numbered: bool = True  # False: the options are buttons, numbered by us in screen order
    selected: int | None = None  # the selected button, when a marked capture tells it

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def choices(self) -> str:
        return ", ".join(str(number) for number, _ in self.options) or "none"

    def as_json(self) -> dict:
        return {
            "text": self.text,
            "options": [{"number": n, "label": label} for n, label in self.options],
            "numbered": self.numbered,
            "digest": self.digest,
        }


def capture(mux, pane_id: str, marked: bool = False) -> str:
    """The screen a dialog is read from, the same for every reader: the pane's whole
    visible screen, wrapped rows joined, without its history (``capture`` with ``lines`` 0).
    ``marked``: with its attributes (colours), which :func:`read` drops for the text and the
    digest and reads only for the selected button."""
    return mux.capture(pane_id, 0, ansi=marked)


def shown(row: str) -> str:
    """``row`` as a dialog's text shows it: without the blanks (U+0020) it ends with, every
    character a screen does not draw as itself written as ``⟦U+XXXX⟧`` (``⟦`` included)."""
    row = row.rstrip(" ")
    if row.isascii() and row.isprintable():
        return row
    return "".join(f"{ESCAPE_OPEN}U+{ord(ch):04X}{ESCAPE_CLOSE}" if _hidden(ch) else ch for ch in row)


def _hidden(ch: str) -> bool:
    if not ch.isprintable():  # controls, format characters, every space but U+0020, separators,
        return True  # surrogates, private-use and unassigned code points
    if ch == ESCAPE_OPEN or ch in _BLANK_GLYPHS:
        return True
    code = ord(ch)
    return code >= 0xAD and any(first <= code <= last for first, last in _IGNORABLE)


def read(agent: str, screen_text: str, marked: bool = False) -> Dialog | None:
    """The dialog on ``screen_text`` (as :func:`capture` reads it), or None when the screen
    does not read awaiting_user. ``marked``: captured with its attributes (``capture`` with
    ``marked``): they are dropped for the text and the digest, read for the selected button."""
    from cafleet.delivery.keystrokes import screen

    if screen.classify(agent, screen_text) != screen.PaneState.AWAITING_USER:
        return None  # (screen strips the attributes of a marked capture itself)
    # Split at newlines only: str.splitlines would also split at U+2028, \x1c and \r, and
    # two different screens would give the same rows.
    coloured = screen_text.split("\n")
    if marked:
        ansi = screen._regex(screen._ANSI)
        raw = [ansi.sub("", row).rstrip(" ") for row in coloured]
    else:
        raw, coloured = [row.rstrip(" ") for row in coloured], []  # no colours: nothing selected known
    while raw and not raw[-1]:
        raw.pop()
    first = next((i for i, row in enumerate(raw) if row), len(raw))
    raw, coloured = raw[first:], coloured[first:]
    rows = tuple(shown(row) for row in raw)
    digest = hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()[:DIGEST_LEN]
    options = _options(raw)
    if options:
        return Dialog(rows, options, digest)
    found = _buttons(agent, raw)
    if found is None:
        return Dialog(rows, (), digest)
    at, labels, starts = found
    selected = _selected(coloured[at], starts) if at < len(coloured) else None
    return Dialog(rows, tuple((n, shown(label)) for n, label in enumerate(labels, 1)), digest, False, selected)


def _buttons(agent: str, rows: list[str]) -> tuple[int, tuple[str, ...], list[int]] | None:
    """(row index, labels, where each label starts in the row) of the last row among
    ``rows`` that draws one of ``agent``'s button sets (:data:`BUTTONS`) near the bottom."""
    sets = BUTTONS.get(agent)
    if not sets:
        return None
    drawn = [i for i, row in enumerate(rows) if row]
    for rank in range(len(drawn) - 1, max(-1, len(drawn) - 2 - OPTIONS_TAIL), -1):
        at = drawn[rank]
        row = rows[at]
        body = row.lstrip(_MARKS)
        parts = [part.strip(" ") for part in body.split("  ") if part.strip(" ")]
        for labels in sets:
            if tuple(parts[: len(labels)]) == labels:
                starts, column = [], len(row) - len(body)
                for label in labels:
                    column = row.index(label, column)
                    starts.append(column)
                    column += len(label)
                return at, labels, starts
    return None


def _selected(marked_row: str, starts: list[int]) -> int | None:
    """Which button (1..N) of a row drawn with attributes is selected: the one drawn on the
    colour of the frame bar that starts the row, when exactly one is."""
    cells = _colours(marked_row)
    bar = next((fg for ch, fg, _ in cells if ch in _BARS), None)
    if bar is None or any(start >= len(cells) for start in starts):
        return None
    on_bar = [n for n, start in enumerate(starts, 1) if cells[start][2] == bar]
    return on_bar[0] if len(on_bar) == 1 else None


def _colours(raw: str) -> list[tuple[str, str | None, str | None]]:
    """The characters of a row captured with attributes, each with its foreground and
    background colour (SGR parameters as written, e.g. ``5;215``; None: the default)."""
    from cafleet.delivery.keystrokes import screen

    ansi = screen._regex(screen._ANSI)
    cells: list[tuple[str, str | None, str | None]] = []
    fg = bg = None
    i = 0
    while i < len(raw):
        found = ansi.match(raw, i) if raw[i] == "\x1b" else None
        if found is None:
            cells.append((raw[i], fg, bg))
            i += 1
            continue
        sequence = found.group(0)
        i = found.end()
        if not (sequence.startswith("\x1b[") and sequence.endswith("m")):
            continue
        codes = (sequence[2:-1] or "0").replace(":", ";").split(";")
        k = 0
        while k < len(codes):
            code = codes[k]
            if code in ("38", "48"):
                width = 2 if codes[k + 1 : k + 2] == ["5"] else 4 if codes[k + 1 : k + 2] == ["2"] else 0
                colour = ";".join(codes[k + 1 : k + 2 + width])
                if code == "38":
                    fg = colour
                else:
                    bg = colour
                k += width + 1
                continue
            if code in ("0", ""):
                fg = bg = None
            elif code == "39":
                fg = None
            elif code == "49":
                bg = None
            elif code.isdigit() and (30 <= int(code) <= 37 or 90 <= int(code) <= 97):
                fg = code
            elif code.isdigit() and (40 <= int(code) <= 47 or 100 <= int(code) <= 107):
                bg = str(int(code) - 10)  # the same colour as its foreground code names it
            k += 1
    return cells


def _options(rows: list[str]) -> tuple[tuple[int, str], ...]:
    """The dialog's numbered list among ``rows`` (raw, trailing blanks removed): the run
    1, 2, … from the last row numbered 1, ending near the bottom; labels escaped."""
    drawn = [row for row in rows if row]
    numbered = []
    for at, row in enumerate(drawn):
        number, label = _option(row)
        if number is not None:
            numbered.append((at, number, label))
    starts = [i for i, (_, number, _) in enumerate(numbered) if number == 1]
    if not starts:
        return ()
    run: list[tuple[int, int, str]] = []
    for entry in numbered[starts[-1] :]:
        if entry[1] != len(run) + 1:
            break
        run.append(entry)
    if len(drawn) - 1 - run[-1][0] > OPTIONS_TAIL:
        return ()  # a numbered list far above the bottom: the transcript's, not the dialog's
    return tuple((number, shown(label)) for _, number, label in run)


def _option(row: str) -> tuple[int | None, str]:
    """(number, label) of a row drawn as an option (``❯ 1. Yes``), or (None, "")."""
    stripped = row.lstrip(_MARKS)
    digits = ""
    for ch in stripped:
        if not ch.isascii() or not ch.isdigit():
            break
        digits += ch
    rest = stripped[len(digits) :]
    if not digits or len(digits) > 2 or not rest.startswith(". "):
        return None, ""
    label = rest[2:].lstrip(" ").split("  ", 1)[0].rstrip(_FRAME)  # its first column, no frame
    if not label.strip():
        return None, ""
    return int(digits), label


def keys_for(agent: str, choice: int) -> tuple[str, bool]:
    """(text to type, whether Enter follows) to pick numbered option ``choice`` in
    ``agent``'s dialog."""
    return str(choice), agent == "standin"


def moves(agent: str, seen: Dialog, choice: int) -> tuple[str, int] | None:
    """(arrow key, presses) that move the selection of ``seen``'s buttons to ``choice``
    (no presses when it is selected already), or None when the screen does not tell which
    button is selected or ``agent`` has no arrow keys for its buttons."""
    arrows = ARROWS.get(agent)
    if arrows is None or seen.numbered or seen.selected is None:
        return None
    steps = choice - seen.selected
    return (arrows[1] if steps >= 0 else arrows[0]), abs(steps)
