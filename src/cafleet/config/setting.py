"""One setting's declaration (:class:`Setting`): its kind, default, bounds and meaning, how
a raw value (an environment variable's, an option's argument) is read and bounded, and how
its allowed values are said in an error and the README table.

Plain classes and no imports beyond the error types: this module is on every command's path.
"""

from __future__ import annotations

from cafleet.errors import SettingError, shown

SWITCH_ON = ("1", "true", "yes", "on")
SWITCH_OFF = ("0", "false", "no", "off")


class Setting:
    """One declared setting.

    kind: "seconds" (a finite number, ``low``..``high``), "number" (the same, of another
    unit: ``noun`` says which), "integer" (decimal digits, ``low``..``high``), "switch" (on/off), "choice" (one of ``choices``), or a free text
    kind ("location", "path", "command", "host", "text") checked where it is used.
    ``audience``: "user" (the README table), "pane" (set by cafleet in member panes for
    the agent to read), "test" (the stand-in agent the tests and the demo run, and the file
    the memory check reads instead of /proc/meminfo). The test hooks are not settings: no
    variable reaches them (:mod:`cafleet.faults`).
    """

    __slots__ = (
        "attr",
        "audience",
        "choices",
        "default",
        "default_text",
        "high",
        "kind",
        "low",
        "meaning",
        "name",
        "noun",
    )

    def __init__(
        self,
        name,
        kind,
        default,
        meaning,
        *,
        low=None,
        high=None,
        choices=None,
        audience="user",
        noun=None,
        default_text=None,
    ):
        self.name = name
        self.kind = kind
        self.default = default
        self.low = low
        self.high = high
        self.meaning = meaning
        self.choices = choices
        self.audience = audience
        self.attr = name.lower().removeprefix("cafleet_").lstrip("-").replace("-", "_")
        self.noun = noun or ("a number of seconds" if kind == "seconds" else "an integer")
        self.default_text = default_text  # how the README shows a default that is not a value

    @property
    def checked(self) -> bool:
        return self.kind in ("seconds", "number", "integer", "switch", "choice", "identifier", "role", "urls", "url")

    def allowed(self) -> str:
        """The allowed values, as an error message and the README table say them."""
        if self.kind in ("seconds", "number"):
            return f"{self.noun} from {plain_number(self.low)} to {plain_number(self.high)}"
        if self.kind == "integer":
            return f"{self.noun} from {self.low} to {self.high}"
        if self.kind == "switch":
            return f"{', '.join(SWITCH_ON[:-1])} or {SWITCH_ON[-1]} (on); {', '.join(SWITCH_OFF[:-1])} or {SWITCH_OFF[-1]} (off)"
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        return {
            "location": "sqlite:///ABS/PATH, an absolute path or postgresql://...",
            "path": "a path",
            "command": "a command name or path",
            "host": "a host name or IP address",
            "identifier": "a lower-case SQL name (a-z, 0-9, _; at most 63)",
            "role": "a PostgreSQL role name, as pg_roles spells it (at most 63 bytes)",
            "url": "an http:// or https:// URL",
            "urls": "http:// or https:// URLs (json+, slack+ or ntfy+ before one: its format), space- or comma-separated",
        }.get(self.kind, "any text")

    def parse(self, raw: str):
        """The value of ``raw`` (an environment value or an option's argument), or
        :class:`SettingError` naming this setting, the quoted value and the allowed range."""
        reader = _READERS.get(self.kind)
        if reader is None:
            return raw  # text, a path, a command, a host: checked where it is used
        value = reader(self, raw)
        if value is _INVALID:
            raise SettingError(f"{self.name} must be {self.allowed()}, got {shown(raw)}.")
        return value

    def read(self, environ):
        """This variable's value in ``environ``; the default when unset or empty."""
        raw = environ.get(self.name, "")
        return self.default if raw == "" else self.parse(raw)


_INVALID = object()  # what a reader returns for a value outside its kind or range


def _read_number(setting: Setting, raw: str):
    text = raw.strip()
    # float() also reads "nan", "inf", "1_0" and non-ASCII digits; only plain decimal
    # numbers are seconds.
    if not (text and text.isascii() and "_" not in text and text.lower().lstrip("+-")[:1] in "0123456789."):
        return _INVALID
    try:
        value = float(text)
    except ValueError:
        return _INVALID
    return value if setting.low <= value <= setting.high else _INVALID


def _read_integer(setting: Setting, raw: str):
    from cafleet.validation import bounded_int

    value = bounded_int(raw, setting.low, setting.high)
    return _INVALID if value is None else value


def _read_switch(_setting: Setting, raw: str):
    text = raw.strip().lower()
    if text in SWITCH_ON:
        return True
    return False if text in SWITCH_OFF or not text else _INVALID


def _read_choice(setting: Setting, raw: str):
    return raw if raw in setting.choices else _INVALID


def _read_identifier(_setting: Setting, raw: str):
    plain = all(c == "_" or "a" <= c <= "z" or "0" <= c <= "9" for c in raw)
    return raw if 0 < len(raw) <= 63 and (raw[0] == "_" or "a" <= raw[0] <= "z") and plain else _INVALID


def _read_role(_setting: Setting, raw: str):
    # Any name the server can hold: at most NAMEDATALEN - 1 bytes, no control character.
    fits = 0 < len(raw.encode("utf-8", "surrogatepass")) <= 63
    return raw if fits and all(c >= " " and c != "\x7f" for c in raw) else _INVALID


def _read_urls(setting: Setting, raw: str):
    # checked here so that a bad URL refuses every command at once, never a post later
    from cafleet.validation import split_urls, url_fault

    urls = split_urls(raw)
    for url in urls:
        fault = url_fault(url)
        if fault is not None:  # said without the URL's own text: it may hold a token
            raise SettingError(f"{setting.name}: {fault}; give {setting.allowed()}.")
    return raw if urls else _INVALID


def _read_url(setting: Setting, raw: str):
    from cafleet.validation import split_format, url_fault

    fault = url_fault(raw) or (None if split_format(raw)[1] == raw else "a URL has a format before it")
    if fault is not None:
        raise SettingError(f"{setting.name}: {fault}; give {setting.allowed()}.")
    return raw


_READERS = {
    "seconds": _read_number,
    "number": _read_number,
    "integer": _read_integer,
    "switch": _read_switch,
    "choice": _read_choice,
    "identifier": _read_identifier,
    "role": _read_role,
    "urls": _read_urls,
    "url": _read_url,
}


def plain_number(value: float) -> str:
    """A bound as people write it: 3600, 0.005 (never 3.6e+03)."""
    return str(int(value)) if value == int(value) else repr(value)
