"""Every setting cafleet reads, declared once: the environment variables (``CAFLEET_*``,
:data:`ENVIRONMENT`) and the bounded numeric options (``--interval``, :data:`OPTIONS`),
each a :class:`~cafleet.config.setting.Setting`, with the defaults other modules share.

The README's configuration table is generated from these declarations
(:mod:`cafleet.config.readme_table`).
"""

from __future__ import annotations

from cafleet.config.setting import Setting

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
