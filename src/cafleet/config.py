"""Every setting cafleet reads: declared once, read and bounded in one place.

Each :class:`Setting` names an environment variable (``CAFLEET_*``) or a numeric option
(``--interval``), its kind, default, bounds and meaning; the README's configuration table
is generated from these declarations (``python -m cafleet.config --markdown``).

A command builds one :class:`Settings` from its environment before its handler runs, so a
bad value is refused before anything is stored: a one-line usage error (exit 2) naming
the variable, the value and the allowed range. An empty variable counts as unset.

Plain classes and no imports beyond ``os`` and the error types: this module is on every
command's path, and hot commands are measured against a bare interpreter start.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from typing import Any

from cafleet.errors import ConfigError, SettingError, shown

DATABASE_FILENAME = "cafleet_v8.db"
DEFAULT_MAX_TEXT_LEN = 200
DEFAULT_SUBMIT_SETTLE = 0.3  # seconds; see delivery/keystrokes/submit.py for why
DEFAULT_LOCK_TIMEOUT = 15.0  # seconds; many senders may queue behind one pane
DEFAULT_SERVER_MAX_STREAMS = 32  # open WebUI pages (event streams) one server serves at once
# What one member of each agent is counted to need, in MiB: the most its process tree held
# from its start to 20 s idle (bench/agent_memory.py), times 1.4 for work, rounded up to
# 50 MiB (docs/performance.md, "Agents' memory").
AGENT_MEMORY_MIB = {"claude": 450, "codex": 400, "opencode": 1650}
DEFAULT_MEMORY_MARGIN_MIB = 512  # kept free besides a new member's estimate
MAX_MIB = 1 << 24  # 16 TiB

HOUR = 3600.0
DAY = 24 * HOUR
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
            return f"{self.noun} from {_number(self.low)} to {_number(self.high)}"
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


def _number(value: float) -> str:
    """A bound as people write it: 3600, 0.005 (never 3.6e+03)."""
    return str(int(value)) if value == int(value) else repr(value)


def _s(*args, **kwargs) -> Setting:
    return Setting(*args, **kwargs)


# --- the environment ----------------------------------------------------------------------

ENVIRONMENT = (
    _s(
        "CAFLEET_DATABASE_URL",
        "location",
        None,
        "the database file, or a PostgreSQL database (postgresql://...)",
        default_text="$XDG_DATA_HOME/cafleet/" + DATABASE_FILENAME,
    ),
    _s("CAFLEET_PG_SCHEMA", "identifier", "cafleet", "PostgreSQL only: the schema that holds cafleet's tables"),
    _s(
        "CAFLEET_PG_TRUSTED_OWNER",
        "role",
        None,
        "PostgreSQL only: a role besides the connecting one that may own the schema and cafleet's tables "
        "(another owner is refused: it can read every message)",
        default_text="none: only the connecting role",
    ),
    _s(
        "CAFLEET_PG_RECONNECT_TIMEOUT",
        "seconds",
        30.0,
        "PostgreSQL only: how long `message wait`/`listen`, `fleet watch` and the fleet keeper keep reconnecting to a server "
        "that ended their session before they give up",
        low=0.0,
        high=DAY,
    ),
    _s(
        "CAFLEET_MULTIPLEXER",
        "choice",
        None,
        "the multiplexer, overriding detection",
        choices=("tmux", "herdr"),
        default_text="herdr inside herdr (HERDR_ENV), else tmux (TMUX)",
    ),
    _s("CAFLEET_HERDR_BIN", "command", "herdr", "the herdr command to run"),
    _s(
        "CAFLEET_BUSY_TIMEOUT",
        "seconds",
        5.0,
        "how long a command waits for another process's write lock",
        low=0.0,
        high=HOUR,
    ),
    _s(
        "CAFLEET_LOCK_TIMEOUT",
        "seconds",
        DEFAULT_LOCK_TIMEOUT,
        "how long a delivery waits for a pane's input lock",
        low=0.0,
        high=HOUR,
    ),
    _s(
        "CAFLEET_SUBMIT_SETTLE",
        "seconds",
        DEFAULT_SUBMIT_SETTLE,
        "pause between typing a line into an agent's input box and pressing Enter",
        low=0.0,
        high=10.0,
    ),
    _s(
        "CAFLEET_WAIT_INTERVAL",
        "seconds",
        0.05,
        "how often `message wait`/`listen` look for a commit by another process",
        low=0.005,
        high=5.0,
    ),
    _s(
        "CAFLEET_MAX_TEXT_LEN",
        "integer",
        DEFAULT_MAX_TEXT_LEN,
        "code points of a body shown in text output and previews (a notice is shown whole; a preview carries at most 300; JSON is never cut)",
        low=1,
        high=1_000_000,
    ),
    _s("CAFLEET_BROKER_HOST", "host", "127.0.0.1", "the address `cafleet server` listens on"),
    _s(
        "CAFLEET_BROKER_PORT",
        "integer",
        8000,
        "the port `cafleet server` listens on",
        low=1,
        high=65535,
        noun="a port number",
    ),
    _s(
        "CAFLEET_SERVER_REQUEST_TIMEOUT",
        "seconds",
        10.0,
        "`cafleet server`: how long a connection has to deliver a whole request",
        low=0.05,
        high=HOUR,
    ),
    _s(
        "CAFLEET_SERVER_MAX_CONNECTIONS",
        "integer",
        100,
        "`cafleet server`: open connections at most (lowered to fit the open-file limit)",
        low=1,
        high=100_000,
    ),
    _s(
        "CAFLEET_SERVER_MAX_STREAMS",
        "integer",
        DEFAULT_SERVER_MAX_STREAMS,
        "`cafleet server`: open event streams (WebUI pages) at most; one more is answered 503 with Retry-After",
        low=1,
        high=100_000,
    ),
    _s("CAFLEET_DEBUG", "switch", False, "show the traceback of an internal error"),
    _s(
        "CAFLEET_KEEPER",
        "switch",
        True,
        "start each fleet's keeper, the resident process that delivers owed previews as soon as a pane can "
        "take them (off: run `cafleet fleet watch`, which then does that job; docs/delivery.md)",
    ),
    _s(
        "CAFLEET_KEEPER_STALLED_AFTER",
        "seconds",
        30.0,
        "a fleet keeper that wrote no heartbeat for this long (stopped, or hung in a call) reads stalled in "
        "`fleet show`, `doctor`, the WebUI and senders' warnings; it beats every quarter of this, at most every 5 s",
        low=0.5,
        high=HOUR,
    ),
    _s(
        "CAFLEET_NOTICE_AWAITING_AFTER",
        "seconds",
        30.0,
        "the keeper's notice to the Director: a member's pane shows a prompt awaiting its user for this long",
        low=0.0,
        high=DAY,
    ),
    _s(
        "CAFLEET_NOTICE_SILENT_AFTER",
        "seconds",
        300.0,
        "the keeper's notice to the Director: a member has neither sent nor ACKed a message this long after "
        "it was spawned",
        low=0.0,
        high=DAY,
    ),
    _s(
        "CAFLEET_NOTICE_INTERVAL",
        "seconds",
        15.0,
        "how often the keeper (or `fleet watch` with the keeper off) looks at every member's pane for the "
        "Director's notices (one multiplexer call a member)",
        low=0.05,
        high=HOUR,
    ),
    _s(
        "CAFLEET_NOTIFY_URL",
        "urls",
        None,
        "the fleet keeper posts each notice of the Director's inbox to these http(s) URLs (space- or "
        "comma-separated; json+, slack+ or ntfy+ before one chooses its format), for a fleet created without "
        '`--notify` (docs/delivery.md, "Notices posted out")',
        default_text="none",
    ),
    _s(
        "CAFLEET_PUBLIC_URL",
        "url",
        None,
        "where people open the WebUI, e.g. a TLS proxy in front of `cafleet server` (its `--public` default): a "
        "posted notice links to its fleet there",
        default_text="no link",
    ),
    _s(
        "CAFLEET_PANE_MIN_WIDTH",
        "integer",
        80,
        "a member's pane is at least this many columns, and the Director's never shrinks below it: a split that "
        "would leave less opens the member in the fleet's own window instead (docs/delivery.md)",
        low=10,
        high=1000,
        noun="a number of columns",
    ),
    _s(
        "CAFLEET_PANE_MIN_HEIGHT",
        "integer",
        20,
        "a member's pane is at least this many rows (as CAFLEET_PANE_MIN_WIDTH)",
        low=5,
        high=1000,
        noun="a number of rows",
    ),
    _s(
        "CAFLEET_EXEC_START_AFTER",
        "seconds",
        60.0,
        "`member exec`: a command whose line was typed into the member's pane but did not start this long "
        "after is reported to the Director as never started",
        low=0.0,
        high=DAY,
    ),
    _s(
        "CAFLEET_EXEC_GRACE",
        "seconds",
        30.0,
        "`member exec`: when the member took no turn of its own this long after its command ended, one line "
        "tells it to continue with the output",
        low=0.0,
        high=DAY,
    ),
    _s(
        "CAFLEET_SSH_CONFIG",
        "path",
        None,
        "an ssh_config file for reaching other hosts (`ssh -F`)",
        default_text="ssh's own (~/.ssh/config)",
    ),
    _s(
        "CAFLEET_SSH_CONTROL_DIR",
        "path",
        None,
        "a private directory for the shared SSH connections' sockets",
        default_text="$XDG_RUNTIME_DIR/cafleet-ssh, else /tmp/cafleet-ssh-<uid>",
    ),
    _s(
        "CAFLEET_WORKTREE_DIR",
        "path",
        None,
        "where `member create --worktree` puts members' git worktrees, one folder per repository "
        "(outside every repository, so none shows in its `git status`; docs/worktrees.md)",
        default_text="$XDG_DATA_HOME/cafleet/worktrees",
    ),
    _s(
        "CAFLEET_PRICE_FILE",
        "path",
        None,
        "a JSON file of model prices (dollars per million tokens) overriding the built-in table of "
        "`member usage`/`fleet usage` (docs/usage.md)",
        default_text="the built-in table",
    ),
    _s(
        "CAFLEET_FLEET_MAX_MEMBERS",
        "integer",
        None,
        "`member create`: members a fleet holds at most besides its Director; one more is refused unless `--force`",
        low=1,
        high=100_000,
        noun="a number of members",
        default_text="no cap",
    ),
    _s(
        "CAFLEET_AGENT_MEMORY_CLAUDE",
        "integer",
        AGENT_MEMORY_MIB["claude"],
        "`member create`, `doctor`: the memory one claude member is counted to need, against its host's "
        'available memory (docs/performance.md, "Agents\' memory")',
        low=1,
        high=MAX_MIB,
        noun="a number of MiB",
    ),
    _s(
        "CAFLEET_AGENT_MEMORY_CODEX",
        "integer",
        AGENT_MEMORY_MIB["codex"],
        "`member create`, `doctor`: the memory one codex member is counted to need, against its host's "
        'available memory (docs/performance.md, "Agents\' memory")',
        low=1,
        high=MAX_MIB,
        noun="a number of MiB",
    ),
    _s(
        "CAFLEET_AGENT_MEMORY_OPENCODE",
        "integer",
        AGENT_MEMORY_MIB["opencode"],
        "`member create`, `doctor`: the memory one opencode member is counted to need, against its host's "
        'available memory (docs/performance.md, "Agents\' memory")',
        low=1,
        high=MAX_MIB,
        noun="a number of MiB",
    ),
    _s(
        "CAFLEET_MEMORY_MARGIN",
        "integer",
        DEFAULT_MEMORY_MARGIN_MIB,
        "`member create`, `doctor`: memory kept free besides a new member's: it starts only when its host's "
        "MemAvailable holds both (not checked where /proc/meminfo cannot be read)",
        low=0,
        high=MAX_MIB,
        noun="a number of MiB",
    ),
    _s("CAFLEET_HOST", "text", None, "the host a member's pane runs on, set in panes on other hosts", audience="pane"),
    _s("CAFLEET_MEMBER_ID", "text", None, "the member's own id, set in each member's pane", audience="pane"),
    _s("CAFLEET_FLEET_ID", "text", None, "the member's fleet id, set in each member's pane", audience="pane"),
    _s(
        "CAFLEET_STANDIN_RECORD_DIR", "text", None, "stand-in agent: where it records what it received", audience="test"
    ),
    _s("CAFLEET_STANDIN_AUTO_REPLY", "text", None, "stand-in agent: 1 replies to every message", audience="test"),
    _s(
        "CAFLEET_STANDIN_START_DELAY",
        "text",
        None,
        "stand-in agent: seconds before it draws its input box",
        audience="test",
    ),
    _s(
        "CAFLEET_STANDIN_START_GATE",
        "text",
        None,
        "stand-in agent: it draws its input box once this file exists",
        audience="test",
    ),
    _s("CAFLEET_BIN", "command", None, "stand-in agent: the cafleet command it runs", audience="test"),
    _s(
        "CAFLEET_NOTIFY_BACKOFF",
        "seconds",
        5.0,
        "notices posted out: seconds before a failed post is tried again, doubling to 60 times this",
        low=0.01,
        high=HOUR,
        audience="test",
    ),
    _s(
        "CAFLEET_MEMINFO",
        "path",
        None,
        "the memory check (`member create`, `doctor`): a file in /proc/meminfo's format read instead of "
        "/proc/meminfo, on the member's host",
        audience="test",
    ),
)

# --- numeric options ----------------------------------------------------------------------

OPTIONS = (
    _s("--interval", "seconds", 5.0, "`fleet watch`: seconds between member checks", low=0.2, high=HOUR),
    _s(
        "--idle-after",
        "seconds",
        600.0,
        "`fleet watch`, `member list --state`: idle (or silent) after this many quiet seconds",
        low=0.0,
        high=30 * DAY,
    ),
    _s(
        "--timeout",
        "seconds",
        None,
        "`message wait`: give up after this many seconds",
        low=0.0,
        high=365 * DAY,
        default_text="wait forever",
    ),
    _s(
        "--per-hour",
        "integer",
        None,
        "`fleet auto-revive`: revivals of one member an hour at most before the keeper gives up on it",
        low=1,
        high=60,
        noun="a number of revivals",
        default_text="unchanged",
    ),
    _s("--lines", "integer", 40, "`member capture`: lines of the pane to print", low=1, high=10_000),
    _s("--port", "integer", 8000, "`cafleet server`: the port to listen on", low=1, high=65535, noun="a port number"),
    # Budgets (docs/usage.md): bounded so that a budget is always a number both stores keep.
    _s(
        "--budget-usd",
        "number",
        None,
        "`member create`: the member's budget in dollars",
        low=0.01,
        high=1e9,
        noun="a number of dollars",
        default_text="no budget",
    ),
    _s(
        "--budget-tokens",
        "integer",
        None,
        "`member create`: the member's budget in tokens",
        low=1,
        high=10**15,
        noun="a number of tokens",
        default_text="no budget",
    ),
    _s(
        "--usd",
        "number",
        None,
        "`fleet budget`: the fleet's budget in dollars",
        low=0.01,
        high=1e9,
        noun="a number of dollars",
        default_text="unchanged",
    ),
    _s(
        "--tokens",
        "integer",
        None,
        "`fleet budget`: the fleet's budget in tokens",
        low=1,
        high=10**15,
        noun="a number of tokens",
        default_text="unchanged",
    ),
)

_BY_NAME = {setting.name: setting for setting in (*ENVIRONMENT, *OPTIONS)}


def declared(name: str) -> Setting:
    return _BY_NAME[name]


def declared_names() -> frozenset[str]:
    """Every declared environment variable's name."""
    return frozenset(setting.name for setting in ENVIRONMENT)


def option(flag: str, raw: str):
    """The value of a numeric option's argument, bounded by its declaration."""
    return _BY_NAME[flag].parse(raw)


class Settings:
    """Every checked environment setting of one command, read and bounded at once, and the
    environment they came from.

    Built once per command before its handler runs (:attr:`cafleet.cli.context.Context.settings`;
    once per process for the WebUI's server and the fleet keeper) and passed down, so a bad
    value refuses the command before anything is stored or typed, and nothing below reads
    the environment again. ``environ`` stays for what is not a setting: the agents' own
    folders (``HOME``, ``CLAUDE_CONFIG_DIR``...) and the environment of child processes
    (:func:`child_environ`).
    """

    __slots__ = (*(s.attr for s in ENVIRONMENT if s.checked), "environ", "_database")

    def __init__(self, environ, database: str | None = None) -> None:
        self.environ = environ
        self._database = database  # given when the caller already chose the database (the WebUI's server)
        for setting in ENVIRONMENT:
            if setting.checked:
                setattr(self, setting.attr, setting.read(environ))

    @property
    def database(self) -> str:
        """The database location (:func:`database_location`: a SQLite file's resolved path
        or a PostgreSQL URL), read on first use: a command that needs no database works
        without one. Only the store package (:mod:`cafleet.store`) tells which it is."""
        if self._database is None:
            self._database = database_location(self.environ)
        return self._database

    @property
    def database_url(self) -> str:
        """``CAFLEET_DATABASE_URL`` as given, before :attr:`database` resolves it ("" when
        unset): the text whose password a scrubber hides."""
        return database_url(self.environ)

    @property
    def host(self) -> str:
        """``CAFLEET_HOST``: the host this member's pane runs on ("" unless on another host)."""
        return pane_host(self.environ)

    @property
    def member_id(self) -> str:
        """``CAFLEET_MEMBER_ID`` as set, stripped ("" when unset): the member this pane was
        started for, a claim that :mod:`cafleet.delivery.authority` checks."""
        return pane_member_id(self.environ)

    if TYPE_CHECKING:  # the attributes are the declarations' names, set above

        def __getattr__(self, name: str) -> Any: ...


# The variables cafleet sets in a member's pane (audience "pane") and the database's location
# as given, read by their declarations: :class:`Settings` offers them as properties, and code
# handed only an environment (a multiplexer's, the caller's identity) reads them here.


def _text(environ, name: str) -> str:
    return _BY_NAME[name].read(environ) or ""


def database_url(environ) -> str:
    """``CAFLEET_DATABASE_URL`` as given ("" when unset) (:attr:`Settings.database_url`)."""
    return _text(environ, "CAFLEET_DATABASE_URL")


def pane_host(environ) -> str:
    """``CAFLEET_HOST`` ("" when unset) (:attr:`Settings.host`)."""
    return _text(environ, "CAFLEET_HOST")


def pane_member_id(environ) -> str:
    """``CAFLEET_MEMBER_ID``, stripped ("" when unset) (:attr:`Settings.member_id`)."""
    return _text(environ, "CAFLEET_MEMBER_ID").strip()


def process_environ():
    """The process's own environment: the one place cafleet reads ``os.environ``. A command
    reads it once, into its context (:class:`cafleet.cli.context.Context`); code below the
    command takes the mapping (or :class:`Settings`) it is given."""
    return os.environ


def child_environ(environ=None, drop=(), **overrides: str) -> dict[str, str]:
    """The environment of a child process cafleet starts (a pane's command, ssh, git, the
    multiplexer's client, the fleet keeper): ``environ`` (the process's own when None)
    copied, without the names in ``drop``, with ``overrides``."""
    base = os.environ if environ is None else environ
    env = {key: value for key, value in base.items() if key not in drop}
    env.update(overrides)
    return env


# --- readers used by the library (each goes through the declarations above) ---------------


def database_location(environ) -> str:
    """The database chosen by ``CAFLEET_DATABASE_URL`` or the XDG default: a file's resolved
    path, or a ``postgresql://`` URL passed through as it is.

    Accepted: ``sqlite:///ABS/PATH`` (``sqlite:////abs/path`` too), a plain absolute path or
    a PostgreSQL URL.
    """
    url = environ.get("CAFLEET_DATABASE_URL", "")
    if url:
        if is_postgres(url):
            return url  # given to libpq as it is (PG* variables and ~/.pgpass fill in the rest)
        if url.startswith("sqlite:///"):
            rest = url[len("sqlite://") :]
            if rest == "/" or "?" in rest:
                raise ConfigError(
                    f"CAFLEET_DATABASE_URL {_shown_location(url)} must be sqlite:///ABS/PATH with a file path and no query string."
                )
            if not rest.startswith("//"):  # sqlite:///relative.db, sqlite:///~/x.db
                raise ConfigError(
                    f"CAFLEET_DATABASE_URL {_shown_location(url)} names a relative path; use sqlite:///ABS/PATH "
                    "(for example sqlite:////home/me/cafleet.db) or an absolute file path."
                )
            return resolved("/" + rest.lstrip("/"))
        if os.path.isabs(url):
            return resolved(url)
        raise ConfigError(
            f"CAFLEET_DATABASE_URL {_shown_location(url)} is not supported; use sqlite:///ABS/PATH, an absolute file path "
            "or postgresql://..."
        )
    return resolved(os.path.join(_data_home(environ, "CAFLEET_DATABASE_URL"), "cafleet", DATABASE_FILENAME))


def _data_home(environ, instead: str) -> str:
    """``$XDG_DATA_HOME``, else ``$HOME/.local/share``; a ConfigError naming ``instead``, the
    setting that avoids needing either, when neither is an absolute path."""
    data_home = environ.get("XDG_DATA_HOME", "")
    if data_home and not os.path.isabs(data_home):
        raise ConfigError(f"XDG_DATA_HOME {shown(data_home)} must be an absolute path.")
    if not data_home:
        home = environ.get("HOME", "")
        if not home or not os.path.isabs(home):
            raise ConfigError(f"HOME is not set to an absolute path; set {instead} to an absolute path.")
        data_home = os.path.join(home, ".local", "share")
    return data_home


def worktree_dir(environ) -> str:
    """The folder that holds members' worktrees (CAFLEET_WORKTREE_DIR), resolved."""
    given = environ.get("CAFLEET_WORKTREE_DIR", "")
    if given:
        if not os.path.isabs(given):
            raise ConfigError(f"CAFLEET_WORKTREE_DIR {shown(given)} must be an absolute path.")
        return resolved(given)
    return resolved(os.path.join(_data_home(environ, "CAFLEET_WORKTREE_DIR"), "cafleet", "worktrees"))


def resolved(path: str) -> str:
    """``path`` with every symbolic link and ``..`` resolved as the kernel resolves them:
    ``link/..`` is the parent of the link's target, not the folder holding the link (a
    textual ``normpath`` would open another file). The database's side files are then
    named beside the file SQLite really opens (it resolves a link to the file itself),
    which is where the diagnosis and the damaged-log check look for them. A folder that
    does not exist yet (cafleet creates it) is taken as written."""
    return os.path.realpath(path)


def _shown_location(url: str) -> str:
    """A database location as an error quotes it: cut short, its password hidden."""
    from cafleet.credentials import redact

    return shown(redact(url))


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def debug(environ) -> bool:
    """``CAFLEET_DEBUG``; on an error path a bad value counts as off."""
    try:
        return _BY_NAME["CAFLEET_DEBUG"].read(environ)
    except SettingError:
        return False


# --- the README table ---------------------------------------------------------------------

TABLE_START = "<!-- configuration table: generated by `python -m cafleet.config --markdown`; do not edit -->"
TABLE_END = "<!-- end of configuration table -->"


def _default_text(setting: Setting) -> str:
    if setting.default_text:
        return setting.default_text
    if setting.default is None:
        return "-"
    if setting.kind == "switch":
        return "on" if setting.default else "off"
    if isinstance(setting.default, float):
        return _number(setting.default)
    return str(setting.default)


def markdown() -> str:
    """The configuration tables for the README (between TABLE_START and TABLE_END)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    def full(s: Setting) -> str:
        return f"| `{s.name}` | {cell(_default_text(s))} | {cell(s.allowed())} | {cell(s.meaning)} |"

    def short(audience: str) -> list[str]:
        return [f"| `{s.name}` | {cell(s.meaning)} |" for s in ENVIRONMENT if s.audience == audience]

    def table(head: str, rows: list[str]) -> list[str]:
        return [head, "|---" * (head.count(" | ") + 1) + "|", *rows]

    full_head, short_head = "| Variable | Default | Allowed | Meaning |", "| Variable | Meaning |"
    lines = table(full_head, [full(s) for s in ENVIRONMENT if s.audience == "user"])
    for title, head, rows in (
        ("Set by cafleet in every member's pane, for the agent to read:", short_head, short("pane")),
        (
            "For tests: read by the stand-in agent (the test suite's and the demo's agent) and the memory check:",
            short_head,
            short("test"),
        ),
        ("Numeric options, bounded the same way:", full_head.replace("Variable", "Option"), [full(s) for s in OPTIONS]),
    ):
        lines += ["", title, "", *table(head, rows)]
    return "\n".join(lines)


def replace_table(readme: str) -> str:
    """``readme`` with the text between the markers replaced by :func:`markdown`."""
    from cafleet.readme import replace_section

    return replace_section(readme, TABLE_START, TABLE_END, markdown())


if __name__ == "__main__":
    import sys

    from cafleet.readme import generator_main

    raise SystemExit(generator_main(sys.argv[1:], "cafleet.config", markdown, replace_table))
