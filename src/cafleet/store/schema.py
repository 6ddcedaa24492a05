"""The baseline schema (ledger version 1), declared once as data, and the shapes diagnosis
checks it against.

The declaration below (tables, columns, kinds, defaults, keys, references, indexes, the
auxiliary tables and indexes too) is the single source of truth. Each engine's DDL is
rendered from it (:func:`render`): the fresh baseline executes it, SQLite's fast
diagnosis compares the stored ``sqlite_master.sql`` text with it, and its detailed
diagnosis reads the expected columns, foreign keys and indexes back from it
(:func:`expected_shape`); PostgreSQL's expected catalogue is rendered from it too
(:func:`cafleet.store.postgres.catalogue.catalogue_shape`). tests/test_schema_declared.py holds the rendered text to
what both engines executed before it was declared.
"""

from __future__ import annotations

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

APPLICATION_ID = 1128351288  # ASCII "CAF8"
HEAD_VERSION = 1
LEDGER_TABLE = "refinery_schema_history"

SQLITE = "sqlite"
POSTGRES = "postgresql"


class Column:
    """One column, declared in one line: ``name kind`` and what constrains it:

    - ``!`` after the kind: NOT NULL; ``pk``: the primary key; ``id``: a generated id
      that is never reused (SQLite's AUTOINCREMENT, PostgreSQL's identity), the key;
    - ``unique``; ``= literal``: the default (an SQL literal without spaces);
    - ``-> table.column``: a reference, ON DELETE RESTRICT (``cascade`` after it: CASCADE).

    Kinds are keys of each engine's type table (:data:`TYPES`)."""

    __slots__ = ("default", "identity", "kind", "name", "not_null", "primary", "references", "unique")

    def __init__(self, spec: str) -> None:
        name, kind, *words = spec.split()
        self.name, self.kind = name, kind.rstrip("!")
        self.not_null = self.primary = self.identity = self.unique = False
        self.default: str | None = None
        self.references: tuple[str, str, str] | None = None
        if kind[-1] == "!":
            self.not_null = True
        if not words:
            return
        self.identity = "id" in words
        self.not_null = self.not_null or self.identity
        self.primary = self.identity or "pk" in words
        self.unique = "unique" in words
        if "=" in words:
            self.default = words[words.index("=") + 1]
        if "->" in words:
            at = words.index("->")
            parent, key = words[at + 1].split(".")
            self.references = (parent, key, "CASCADE" if "cascade" in words[at + 2 :] else "RESTRICT")


class Table:
    """A table, declared as its columns' lines (:class:`Column`) joined by commas and, when
    it spans several columns, its primary key."""

    __slots__ = ("_columns", "declared_key", "name", "spec")

    def __init__(self, name: str, columns: str, primary_key: tuple[str, ...] = ()) -> None:
        self.name = name
        self.spec = columns
        self.declared_key = primary_key
        self._columns: tuple[Column, ...] | None = None  # read from the spec when first asked

    @property
    def columns(self) -> tuple[Column, ...]:
        if self._columns is None:
            self._columns = tuple(Column(spec) for spec in self.spec.split(","))
        return self._columns

    @property
    def primary_key(self) -> tuple[str, ...]:
        return self.declared_key or tuple(column.name for column in self.columns if column.primary)


class Index:
    """An index: its table, its key columns and, for a partial one, its predicate."""

    __slots__ = ("columns", "name", "table", "where")

    def __init__(self, name: str, table: str, columns: tuple[str, ...], where: str = "") -> None:
        self.name, self.table, self.columns, self.where = name, table, columns, where


# --- the declaration: the seed's tables (docs/storage.md), in the order they are created ---

DECLARED_TABLES: tuple[Table, ...] = (
    Table(
        "fleets",
        "fleet_id int id, name text, created_at text!, deleted_at text, director_member_id int -> members.member_id",
    ),
    Table(
        "members",
        "member_id int id, fleet_id int! -> fleets.fleet_id, name text!, description text!, status text!, "
        "registered_at text!, deregistered_at text",
    ),
    Table(
        "member_placements",
        "member_id int! pk -> members.member_id cascade, mux_session text!, mux_window_id text!, mux_pane_id text, "
        "backend text! = 'tmux', coding_agent text!, created_at text!",
    ),
    Table(
        "messages",
        "message_id int id, from_member_id int! -> members.member_id, to_member_id int! -> members.member_id, "
        "created_at text!, status_state text!, status_timestamp text!, text text!, notified_at text",
    ),
    Table(
        "asset_installs",
        "coding_agent text!, path text!, cafleet_version text!, installed_at text!",
        primary_key=("coding_agent", "path"),
    ),
    Table(LEDGER_TABLE, "version int4 pk, name varchar255, applied_on varchar255, checksum varchar255"),
)

DECLARED_INDEXES: tuple[Index, ...] = (
    Index("idx_members_fleet_status", "members", ("fleet_id", "status")),
    Index("idx_messages_to_member_status_ts", "messages", ("to_member_id", "status_timestamp")),
    Index("idx_messages_from_member_status_ts", "messages", ("from_member_id", "status_timestamp")),
)

# cafleet's auxiliary indexes: not part of the format (the seed allows unrelated auxiliary
# indexes beside the required definitions), so the ledger stays at version 1 and a file
# without them is still accepted, only slower. Never part of the baseline (which is exactly
# the seed's tables): created where first needed, each in a transaction of its own
# (Store.create_auxiliary; the pending index by the first `fleet create`), or by `cafleet
# setup`; `cafleet doctor` reports one that is missing.
#
# idx_cafleet_aux_messages_pending: the pending (unacknowledged) messages of each
# recipient, newest status first. Its predicate is the inbox reads' own ("not completed",
# so a row with an unknown state is read and refused, never skipped); a query for owed
# previews repeats that term beside its `= 'input_required'` so SQLite can use the index. poll, listen, wait and the owed-preview search read
# only these entries instead of every message the member ever received.
DECLARED_AUX_INDEXES: tuple[Index, ...] = (
    Index(
        "idx_cafleet_aux_messages_pending",
        "messages",
        ("to_member_id", "status_timestamp"),
        where="status_state != 'completed'",
    ),
    # idx_cafleet_aux_execs_open: the execs that still need someone (in flight, or finished
    # and the member not yet nudged: nudged_at is set once nothing more will be done), by
    # fleet and member; what the drain asks before each preview and the keeper on every
    # round, so no read walks the exec history.
    Index("idx_cafleet_aux_execs_open", "cafleet_aux_execs", ("fleet_id", "member_id"), where="nudged_at IS NULL"),
    # idx_cafleet_aux_revivals_member: one member's revivals, in order (what the keeper
    # counts before reviving it), without walking every fleet's history.
    Index("idx_cafleet_aux_revivals_member", "cafleet_aux_revivals", ("member_id", "revival_id")),
)

# cafleet's auxiliary tables: like the auxiliary indexes, outside the format (the seed allows
# unrelated auxiliary tables), created by the first write that needs one (`member create`,
# `fleet budget`), in a transaction of its own, or by `cafleet setup`; every command works on
# a file without them, and `cafleet doctor` reports one missing or with another definition.
DECLARED_AUX_TABLES: tuple[Table, ...] = (
    # cafleet_aux_member_usage_sources: what ties a member to its coding agent's own usage
    # records (docs/usage.md), written by `member create`: the agent, the session id cafleet
    # chose (claude's --session-id), the agent's config/data folder, the pane's working
    # directory and the spawn time (opencode's sessions are matched on these), and the
    # member's budgets.
    Table(
        "cafleet_aux_member_usage_sources",
        "member_id int! pk, coding_agent text!, session_id text, data_dir text, cwd text!, started_at text!, "
        "budget_usd real, budget_tokens int",
    ),
    # cafleet_aux_notices: the notices the fleet keeper put in its Director's inbox
    # (docs/delivery.md, "Notices in the Director's inbox"): one row per notice, naming its
    # message (a self-send of the Director), its kind, what it is about (`member:5`,
    # `host:box`) and the dialog's digest; `cleared_at` is set when the condition cleared
    # (the episode ended, so the next one gets a notice of its own).
    Table(
        "cafleet_aux_notices",
        "message_id int! pk, fleet_id int!, kind text!, subject text!, member_id int, digest text, opened_at text!, "
        "cleared_at text",
    ),
    # cafleet_aux_fleet_budgets: a fleet's budget (`cafleet fleet budget`), over all its members.
    Table("cafleet_aux_fleet_budgets", "fleet_id int! pk, budget_usd real, budget_tokens int"),
    # cafleet_aux_member_usage_totals: each member's usage as last read from its agent's
    # records (docs/usage.md, "Stored totals"), kept current by the fleet keeper (or `fleet
    # watch`): the totals by model as JSON, and where each file's reading stopped (its
    # identity, size and offset) so that the next read parses only what was appended. The
    # budget gate, the WebUI and `fleet watch` read this row, never the agent's files.
    Table("cafleet_aux_member_usage_totals", "member_id int! pk, updated_at text!, totals text!, state text!"),
    # cafleet_aux_member_worktrees: a member's own git worktree (`member create --worktree`,
    # docs/worktrees.md): the repository (its main worktree's folder), the worktree's path
    # (never another member's: UNIQUE, and rows are kept after removal), its branch, the
    # base as given and the commit it resolved to, and where it stands (adding, ready,
    # kept after the member's deletion, removed), and the host it is on (NULL: this machine).
    Table(
        "cafleet_aux_member_worktrees",
        "member_id int! pk, repo text!, path text! unique, branch text!, base text!, base_commit text!, status text!, "
        "created_at text!, removed_at text, host text",
    ),
    # cafleet_aux_fleet_worktrees: a fleet whose members get a worktree unless told
    # otherwise (`fleet create --worktrees`).
    Table("cafleet_aux_fleet_worktrees", "fleet_id int! pk, worktrees int!"),
    # cafleet_aux_member_spawns: what a member was started with, so that `fleet restore` and
    # `member revive` can start it again (docs/delivery.md, "A fleet outlives its panes"): its
    # model and effort, the spawn prompt as given, the folder its pane started in, and the
    # session of its agent that a restore resumes (kept once known).
    Table(
        "cafleet_aux_member_spawns",
        "member_id int! pk, model text, effort text, prompt text!, cwd text, session_id text",
    ),
    # cafleet_aux_fleet_placement: where a fleet's members' panes open unless `member create
    # --placement` says (`fleet create --placement`: auto, split or window).
    Table("cafleet_aux_fleet_placement", "fleet_id int! pk, placement text!"),
    # cafleet_aux_fleet_revive: a fleet whose keeper revives a member whose agent died
    # (`fleet create --revive`), and how many times an hour at most for one member.
    Table("cafleet_aux_fleet_revive", "fleet_id int! pk, per_hour int!"),
    # cafleet_aux_revivals: each revival the keeper tried (or gave up), and each `member
    # revive` (which starts the keeper's count again): the member, when, who (keeper,
    # gave_up, director) and the outcome as said to the Director.
    Table(
        "cafleet_aux_revivals",
        "revival_id int id, fleet_id int!, member_id int!, at text!, actor text!, outcome text!",
    ),
    # cafleet_aux_execs: the commands the Director runs in a member's pane (`cafleet member
    # exec`, docs/delivery.md, "Commands run in a member's pane"): the member and the Director
    # it is run for, the command's text (never typed: the pane gets a line naming only the id),
    # when it was created, dispatched (the line typed into the member's pane), started (claimed
    # by `member exec-run`, once) and finished, who runs it (host, pid and start time: whether
    # it vanished), its exit status (128 + N for signal N), how it ended (NULL while in flight:
    # finished, never_started, vanished), the notice that told the Director and when the member
    # was told to go on with the output (the grace period's nudge).
    # cafleet_aux_fleet_notify: the URLs a fleet's notices are posted to (`fleet create
    # --notify`, docs/delivery.md, "Notices posted out"); none: the keeper's CAFLEET_NOTIFY_URL.
    Table("cafleet_aux_fleet_notify", "fleet_id int!, url text!", primary_key=("fleet_id", "url")),
    # cafleet_aux_notice_posts: what became of each notice at each URL (the URL's digest, never
    # the URL: it may hold a token), so that a keeper started again neither loses nor repeats a
    # post: `start` (the newest notice when the URL was first seen: older ones are never
    # posted), `pending` (tried `attempts` times, next at `next_try_at`, failing since
    # `failed_at` for `last_error`), `posted` (a 2xx, at `posted_at`) or `gave_up` (a 4xx).
    Table(
        "cafleet_aux_notice_posts",
        "fleet_id int!, message_id int!, url_key text!, state text!, attempts int!, next_try_at text, "
        "posted_at text, failed_at text, last_error text",
        primary_key=("fleet_id", "message_id", "url_key"),
    ),
    Table(
        "cafleet_aux_execs",
        "exec_id int id, fleet_id int!, member_id int!, director_id int!, command text!, created_at text!, "
        "dispatched_at text, started_at text, runner text, finished_at text, exit_status int, outcome text, "
        "notice_id int, nudged_at text",
    ),
)

# An index over one of cafleet's auxiliary tables comes with its table: while the table is
# missing, the index is not reported on its own (the table is), and it is created with the
# table (diagnosis.compare_auxiliary, add_auxiliary_indexes). Index -> its table.
COMES_WITH: dict[str, str] = {
    index.name: index.table
    for index in DECLARED_AUX_INDEXES
    if index.table in {table.name for table in DECLARED_AUX_TABLES}
}


# --- rendering: each engine's DDL and PostgreSQL's catalogue as it reads back ------------

# A column's kind in each engine's DDL (PostgreSQL's catalogue reads them back as
# postgres.CATALOGUE_TYPES).
TYPES: dict[str, dict[str, str]] = {
    SQLITE: {"int": "INTEGER", "int4": "INT4", "text": "TEXT", "real": "REAL", "varchar255": "VARCHAR(255)"},
    POSTGRES: {
        "int": "BIGINT",
        "int4": "INTEGER",
        "text": "TEXT",
        "real": "DOUBLE PRECISION",
        "varchar255": "VARCHAR(255)",
    },
}
# How each engine spells a generated id that is never reused, after the column's type.
IDENTITY = {SQLITE: "NOT NULL PRIMARY KEY AUTOINCREMENT", POSTGRES: "GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"}


class Rendered:
    """One engine's DDL: ``tables`` and ``aux_tables`` (name -> CREATE TABLE), the
    foreign keys added after every table exists (``late_foreign_keys``: PostgreSQL checks
    a reference when it is declared, and fleets and members reference each other), and
    ``indexes`` and ``aux_indexes`` (name -> CREATE INDEX)."""

    __slots__ = ("aux_indexes", "aux_tables", "indexes", "late_foreign_keys", "tables")

    def __init__(self, engine: str) -> None:
        late: list[str] = []
        self.tables = _render_tables(DECLARED_TABLES, engine, late)
        self.late_foreign_keys = tuple(late)
        self.indexes = {index.name: _render_index(index) for index in DECLARED_INDEXES}
        self.aux_tables = _render_tables(DECLARED_AUX_TABLES, engine, late)
        self.aux_indexes = {index.name: _render_index(index) for index in DECLARED_AUX_INDEXES}


def render(engine: str) -> Rendered:
    """The DDL of ``engine`` (SQLITE or POSTGRES), rendered from the declaration."""
    return Rendered(engine)


def _render_tables(tables: tuple[Table, ...], engine: str, late: list[str]) -> dict[str, str]:
    declared: set[str] = set()
    rendered = {}
    for table in tables:
        declared.add(table.name)
        lines = [_render_column(table.name, column, engine, declared, late) for column in table.columns]
        if len(table.primary_key) > 1:
            lines.append(f"PRIMARY KEY ({', '.join(table.primary_key)})")
        rendered[table.name] = f"CREATE TABLE {table.name} (\n" + ",\n".join("    " + line for line in lines) + "\n)"
    return rendered


def _render_column(table: str, column: Column, engine: str, declared: set[str], late: list[str]) -> str:
    text = f"{column.name} {TYPES[engine][column.kind]}"
    if column.identity:
        return f"{text} {IDENTITY[engine]}"
    if column.not_null:
        text += " NOT NULL"
    if column.primary:
        text += " PRIMARY KEY"
    if column.references is not None:
        parent, key, on_delete = column.references
        reference = f"REFERENCES {parent}({key}) ON DELETE {on_delete}"
        if engine == POSTGRES and parent not in declared:  # added once the parent exists
            late.append(
                f"ALTER TABLE {table} ADD CONSTRAINT {table}_{column.name}_fkey FOREIGN KEY ({column.name}) {reference}"
            )
        else:
            text += " " + reference
    if column.default is not None:
        text += f" DEFAULT {column.default}"
    if column.unique:
        text += " UNIQUE"
    return text


def _render_index(index: Index) -> str:
    text = f"CREATE INDEX {index.name} ON {index.table} ({', '.join(index.columns)})"
    return f"{text} WHERE {index.where}" if index.where else text


# What the SQLite store executes and compares stored text with. The required objects are
# rendered on import (every open's fast diagnosis compares them); the auxiliary ones when
# first asked for (module __getattr__), which a hot command rarely does.
TABLES: dict[str, str] = _render_tables(DECLARED_TABLES, SQLITE, [])
INDEXES: dict[str, str] = {index.name: _render_index(index) for index in DECLARED_INDEXES}
AUX_INDEXES: dict[str, str]
AUX_TABLES: dict[str, str]


def __getattr__(name: str) -> dict[str, str]:
    if name == "AUX_TABLES":
        value = globals()[name] = _render_tables(DECLARED_AUX_TABLES, SQLITE, [])
        return value
    if name == "AUX_INDEXES":
        value = globals()[name] = {index.name: _render_index(index) for index in DECLARED_AUX_INDEXES}
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def create_if_missing(sql: str) -> str:
    """``CREATE INDEX name`` as ``CREATE INDEX IF NOT EXISTS name`` (the stored text of an
    index created either way is the statement without IF NOT EXISTS)."""
    if sql.startswith("CREATE TABLE "):
        return sql.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1)
    return sql.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)


AUTOINCREMENT_TABLES = tuple(table.name for table in DECLARED_TABLES if any(c.identity for c in table.columns))


class Shape:
    """What the detailed diagnosis expects, read back from the DDL above by SQLite itself.

    Used when the fast text comparison does not match (an equivalent schema written
    differently, or a damaged one whose first broken part must be named); built once, in
    memory, only on that slow path, so the DDL is the one statement of the shape.

    - ``columns``: table -> ((name, declared type, notnull, default, pk position), ...)
    - ``foreign_keys``: table -> ((from column, parent table, parent column, on delete), ...)
    - ``index_columns``: index name -> (table, columns)
    """

    __slots__ = ("columns", "foreign_keys", "index_columns")

    def __init__(self) -> None:
        from cafleet.store import sqlite_driver as sqlite3

        conn = sqlite3.connect(":memory:")
        try:
            for sql in (*TABLES.values(), *INDEXES.values()):
                conn.execute(sql)
            self.columns = {
                table: tuple(
                    (r[1], (r[2] or "").upper(), r[3], r[4], r[5]) for r in conn.execute(f"PRAGMA table_xinfo({table})")
                )
                for table in TABLES
            }
            self.foreign_keys = {
                table: tuple(
                    (r[3], r[2], r[4], (r[6] or "").upper())  # in the order declared
                    for r in sorted(conn.execute(f"PRAGMA foreign_key_list({table})"), key=lambda r: -r[0])
                )
                for table in TABLES
            }
            self.index_columns = {
                name: (table, tuple(r[2] for r in conn.execute(f"PRAGMA index_info({name})")))
                for name, table in conn.execute(
                    "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
                )
                if name in INDEXES
            }
        finally:
            conn.close()


_SHAPE: list[Shape] = []


def expected_shape() -> Shape:
    if not _SHAPE:
        _SHAPE.append(Shape())
    return _SHAPE[0]


def baseline_checksum() -> str:
    """A stable checksum of the baseline DDL, recorded in the ledger row."""
    import hashlib

    digest = hashlib.sha256()
    for sql in (*TABLES.values(), *INDEXES.values()):
        digest.update(sql.encode())
        digest.update(b";\n")
    return digest.hexdigest()[:16]


def add_auxiliary_indexes(store: Store) -> list[str]:
    """Create every auxiliary table and index of cafleet's that the database lacks
    (``cafleet setup``); returns the names created, tables first. One write transaction of
    their own; the ledger and required shape are unchanged. A table or index of that name
    with another definition is left as it is (``cafleet doctor`` reports it)."""
    problems = store.auxiliary_problems()
    tables = [table.name for table in DECLARED_AUX_TABLES if problems.get(table.name) == "missing"]
    indexes = [  # an index over a missing table is not reported on its own: it comes with it
        index.name
        for index in DECLARED_AUX_INDEXES
        if problems.get(index.name) == "missing" or COMES_WITH.get(index.name) in tables
    ]
    missing = tables + indexes
    return store.create_auxiliary(missing) if missing else []
