"""The preview typed into a recipient's pane (docs/delivery.md), and the sanitiser that makes any text
safe to type.

A message body is untrusted. It is typed into a coding agent's input box, so one control
character could move the cursor, submit early (CR), interrupt the agent (ESC, Ctrl-C),
retitle the terminal (OSC) or reorder what a human sees (bidi overrides). ``sanitise``
therefore keeps only printable text and line breaks:

* escape sequences are dropped whole, introducer, parameters and final byte, so no
  ``[31m`` residue is left: CSI (``ESC [`` / U+009B), the string sequences OSC, DCS, SOS, PM
  and APC (``ESC ] P X ^ _`` / U+009D U+0090 U+0098 U+009E U+009F, up to BEL, ST, CAN, SUB
  or the next ESC; an unterminated one runs to the end of the text, as in a terminal) and
  the short ``ESC <intermediates> <final>`` forms (``ESC ( B``, ``ESC c``);
* every other C0 control, DEL and C1 control is dropped; TAB becomes a space;
* CR LF, CR, LF, NEL (U+0085) and the Unicode line/paragraph separators become one LF;
* format characters (category Cf) are dropped: bidi embeddings, overrides, isolates and
  marks, zero-width space, BOM, interlinear annotations and the invisible "tag" characters
  U+E0000-U+E007F that can smuggle hidden instructions to a language model. Only ZWJ and
  ZWNJ are kept, because emoji sequences and several scripts need them;
* lone surrogates (category Cs) are dropped: they cannot be encoded to send to a pane.

Printable text, including private-use and not-yet-assigned code points and non-ASCII
spaces, passes unchanged. The common case, a body that is already printable, costs one
``str.isprintable`` call; this module imports nothing at load time.
"""

from __future__ import annotations

NEWLINE_MARK = "⏎"
ELLIPSIS = "…"
# The most code points of body a preview carries, whatever ``CAFLEET_MAX_TEXT_LEN`` says:
# the preview only wakes the recipient, which reads the whole body with ``message poll`` /
# ``message show``. A typed line costs time to draw (opencode 1.18.33 showed a 560-character
# line 25 s after it was typed on a loaded machine) and room in the box (it must be seen
# there to be confirmed): 300 code points and the header fill at most 5 rows of an
# 80-column box (docs/delivery.md, step 4).
PREVIEW_MAX_LEN = 300

# 8-bit C1 introducers and the 7-bit ESC form each one stands for.
_C1_INTRODUCERS = {"\x9b": "[", "\x9d": "]", "\x90": "P", "\x98": "X", "\x9e": "^", "\x9f": "_"}
_STRING_KINDS = "]PX^_"  # OSC, DCS, SOS, PM, APC: their body runs to a terminator
_STRING_ENDS = "\x07\x9c\x18\x1a"  # BEL, ST (8-bit), CAN, SUB; ESC is handled apart
_KEPT_FORMAT = "\u200c\u200d"  # ZWNJ, ZWJ
_LINE_BREAKS = "\n\r\x85\u2028\u2029"

# What each non-printable character becomes (None = dropped); filled lazily beyond ASCII.
_DECISIONS: dict[str, str | None] = {chr(c): None for c in (*range(0x20), *range(0x7F, 0xA0))}
_DECISIONS.update(dict.fromkeys(_LINE_BREAKS, "\n"))
_DECISIONS["\t"] = " "


def sanitise(text: str) -> str:
    """``text`` with every control character neutralised; LF is the only control left."""
    if text.isprintable():
        return text
    if "\x1b" in text or any(intro in text for intro in _C1_INTRODUCERS):
        text = _strip_sequences(text)
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    table = {}
    for ch in set(text):
        if not ch.isprintable():
            replacement = _decision(ch)
            if replacement != ch:
                table[ord(ch)] = replacement
    return text.translate(table)


def flatten(text: str) -> str:
    """``text`` sanitised and on one line: every line break shown as ``⏎``."""
    return sanitise(text).replace("\n", NEWLINE_MARK)


def render_preview(message_id: int, sender_member_id: int, created_at: str, body: str, max_len: int) -> str:
    """The preview's header naming the message and, after a line break, the flattened body
    cut to ``max_len`` code points, and never more than :data:`PREVIEW_MAX_LEN` (``…``
    appended only when something was cut). It is typed as one line: :func:`flatten` shows
    that break as ``⏎`` too (delivery/keystrokes/submit.py)."""
    if max_len < 0:
        raise ValueError("max_len must not be negative")
    max_len = min(max_len, PREVIEW_MAX_LEN)
    header = f"[cafleet msg {message_id} from {sender_member_id} {flatten(created_at)}]"
    line = flatten(body)
    if len(line) > max_len:
        line = line[:max_len] + ELLIPSIS
    return f"{header}\n{line}"


def _decision(ch: str) -> str | None:
    try:
        return _DECISIONS[ch]
    except KeyError:
        pass
    import unicodedata

    category = unicodedata.category(ch)
    # kept: ZWJ/ZWNJ, non-ASCII spaces, private use, unassigned (inert when printed)
    decision = None if category in ("Cc", "Cs") or (category == "Cf" and ch not in _KEPT_FORMAT) else ch
    _DECISIONS[ch] = decision
    return decision


def _strip_sequences(text: str) -> str:
    """Drop every escape sequence whole; other characters pass through untouched."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\x1b":
            if i + 1 == n:
                break  # a lone trailing ESC
            kind, body = text[i + 1], i + 2
        elif ch in _C1_INTRODUCERS:
            kind, body = _C1_INTRODUCERS[ch], i + 1
        else:
            out.append(ch)
            i += 1
            continue
        if kind == "[":
            i = _skip_csi(text, body)
        elif kind in _STRING_KINDS:
            i = _skip_string(text, body)
        elif ch == "\x1b" and " " <= kind <= "/":
            i = _skip_short(text, i + 1)
        elif ch == "\x1b" and "0" <= kind <= "~":
            i = body  # a two-character escape such as ESC 7 or ESC c
        else:
            i += 1  # ESC before something that starts no sequence: drop the ESC alone
    return "".join(out)


def _skip_csi(text: str, i: int) -> int:
    """Index after a CSI's parameters, intermediates and final byte. A malformed byte
    ends the sequence and is kept, to be judged on its own."""
    n = len(text)
    while i < n and "0" <= text[i] <= "?":
        i += 1
    while i < n and " " <= text[i] <= "/":
        i += 1
    if i < n and "@" <= text[i] <= "~":
        i += 1
    return i


def _skip_string(text: str, i: int) -> int:
    """Index after a string sequence's terminator (ESC ``\\`` counts as one; any other ESC
    aborts the string and starts a new sequence)."""
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\x1b":
            return i + 2 if i + 1 < n and text[i + 1] == "\\" else i
        if ch in _STRING_ENDS:
            return i + 1
        i += 1
    return n


def _skip_short(text: str, i: int) -> int:
    """Index after ``ESC <intermediates> <final>`` (``i`` is the first intermediate)."""
    n = len(text)
    while i < n and " " <= text[i] <= "/":
        i += 1
    if i < n and "0" <= text[i] <= "~":
        i += 1
    return i
