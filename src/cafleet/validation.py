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


# --- the URLs notices are posted to (docs/delivery.md, "Notices posted out") ---------------

NOTIFY_FORMATS = ("json", "slack", "ntfy")
MAX_URL = 2000  # characters


def split_urls(raw: str) -> list[str]:
    """The URLs of a space- or comma-separated list (``CAFLEET_NOTIFY_URL``, ``--notify``)."""
    return [part for part in raw.replace(",", " ").split() if part]


def check_url(url: str, where: str) -> str:
    """``url`` when it is a URL notices can be posted to; else a one-line UsageError that
    names ``where`` and shows the URL without what may be a secret."""
    fault = url_fault(url)
    if fault is not None:
        raise UsageError(
            f"{where}: {fault}; give an http:// or https:// URL (optionally json+, slack+ or ntfy+ before it)."
        )
    return url


def url_fault(url: str) -> str | None:
    """Why ``url`` cannot be posted to, or None."""
    from urllib.parse import urlsplit

    if len(url) > MAX_URL:
        return f"a URL is longer than {MAX_URL} characters"
    if not url or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "a URL is empty or holds a space or control character"
    kind, target = split_format(url)
    if "://" not in target:
        return "a URL has no http:// or https:// before it"
    if kind not in NOTIFY_FORMATS:
        return f"a URL names an unknown format {shown(kind)}"
    try:
        parts = urlsplit(target)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        return f"the URL {shown_url(url)} is not a valid URL"
    if parts.scheme.lower() not in ("http", "https"):
        return f"the URL {shown_url(url)} is not an http or https URL"
    if not parts.hostname:
        return f"the URL {shown_url(url)} names no host"
    return None


def split_format(url: str) -> tuple[str, str]:
    """(format, the URL to post to) of a stored URL (see the module's text)."""
    from urllib.parse import urlsplit

    head, plus, rest = url.partition("+")
    if plus and "://" in rest and "/" not in head and ":" not in head:
        return head.lower(), rest
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        host = ""
    if host == "hooks.slack.com":
        return "slack", url
    if host == "ntfy.sh":
        return "ntfy", url
    return "json", url


def shown_url(url: str) -> str:
    """``scheme://host[:port]/…``: what a log line, `fleet show` or an error may say of a URL
    (its userinfo, path and query may hold a token)."""
    from urllib.parse import urlsplit

    kind, target = split_format(url)
    scheme, _, rest = target.partition("://")
    try:
        parts = urlsplit(target)
        host = parts.hostname or "?"
        port = parts.port
    except ValueError:
        host, port = "?", None
    if ":" in host:
        host = f"[{host}]"
    prefix = f"{kind}+" if url != target else ""
    tail = "/…" if rest.partition("@")[2] or "/" in rest or "?" in rest else ""
    return f"{prefix}{scheme[:10]}://{host}{f':{port}' if port else ''}{tail}"
