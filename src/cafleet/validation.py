"""What cafleet accepts as an id, a name, a description or a message body: one home for
every rule, used by the command line, the WebUI API and the broker.

Each check takes ``where``, the name the caller knows the value by: an argument or option
on the command line (``FLEET_ID``, ``--name``), a field or path part in the WebUI
(``fleet id``, ``text``), the domain word in the broker (``the fleet name``). The error is
a :class:`~cafleet.errors.UsageError` whose message names ``where`` and quotes a bad value
cut short (:func:`~cafleet.errors.shown`), so an error never echoes a whole input.

Stored text is exact: names, descriptions and bodies are kept as given (control
characters included) and made display-safe only when shown as text
(:func:`cafleet.render.display_safe`); JSON output is exact.

Cheap on purpose: no imports beyond the error types, as it is on every command's path.
"""

from __future__ import annotations

from cafleet.errors import UsageError, shown

MAX_ID = 2**63 - 1  # the largest SQLite INTEGER
MAX_BODY_BYTES = 16 * 1024 * 1024
"""The longest message body, in bytes of UTF-8 (16 MiB): what `--file` reads at most (plus
one byte, to tell a longer input), so an endless stream is refused, never held in memory."""


def bounded_int(raw: str, low: int, high: int) -> int | None:
    """The integer that ``raw`` writes in plain decimal (ASCII digits; surrounding
    whitespace and leading zeros allowed) when it is from ``low`` to ``high`` (``low`` at
    least 0); None otherwise. The digits are counted before ``int()``, so a 5,000-digit
    value never reaches int()'s digit limit (ValueError)."""
    text = raw.strip()
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(high)):
        return None
    value = int(digits)
    return value if low <= value <= high else None


def parse_id(raw: str, where: str) -> int:
    """A positive id from its decimal text (surrounding whitespace and leading zeros allowed).

    SQLite integers are signed 64-bit: a larger Python int cannot even be bound as a query
    parameter (OverflowError) and names no row anyway.
    """
    value = bounded_int(raw, 1, MAX_ID)
    if value is not None:
        return value
    text = raw.strip()
    if text.isascii() and text.isdigit() and text.lstrip("0"):
        raise UsageError(f"{where} must be at most {MAX_ID}, got {shown(raw)}.")
    raise UsageError(f"{where} must be a positive integer, got {shown(raw)}.")


def id_number(value, where: str) -> int:
    """An id given as a JSON number: an int (not a bool) from 1 to MAX_ID."""
    if type(value) is not int or not 0 < value <= MAX_ID:
        raise UsageError(f"{where} must be a positive integer.")
    return value


def _unicode(value: str, where: str, hint: str | None = None) -> str:
    """Text that can be stored: no lone surrogates (what invalid UTF-8 in argv becomes)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{where} is not valid UTF-8.", hint) from None
    return value


def name(value: str, where: str) -> str:
    """A fleet or member name: valid Unicode and not blank."""
    if not isinstance(value, str):
        raise UsageError(f"{where} must be a string.")
    _unicode(value, where)
    if not value.strip():
        raise UsageError(f"{where} must not be blank.")
    return value


def description(value: str, where: str) -> str:
    """A member description: valid Unicode (it may be blank)."""
    if not isinstance(value, str):
        raise UsageError(f"{where} must be a string.")
    return _unicode(value, where)


def body(value: str, where: str = "the body", hint: str | None = None) -> str:
    """A message body: valid Unicode, not blank (only whitespace counts as blank) and at
    most MAX_BODY_BYTES bytes of UTF-8."""
    if not isinstance(value, str):
        raise UsageError(f"{where} must be a string.")
    _unicode(value, where, hint)
    if not value.strip():
        raise UsageError("the body is blank; a message needs a non-blank body.")
    if len(value) > MAX_BODY_BYTES // 4 and len(value.encode("utf-8")) > MAX_BODY_BYTES:
        raise UsageError(f"{where} is longer than {MAX_BODY_BYTES} bytes, the most a body may hold.")
    return value


def not_a_notice(value: str, where: str = "the body") -> str:
    """A message body no line of which begins like a notice's header
    (:func:`cafleet.render.notice_line`): only cafleet writes notices."""
    from cafleet import render

    number = render.notice_line(value)
    if number is not None:
        raise UsageError(
            f"line {number} of {where} begins like a cafleet notice ({render.NOTICE_START}…]), which only cafleet "
            "itself writes: reword that line, or quote it behind '> '."
        )
    return value
