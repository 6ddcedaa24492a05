"""The baseline schema (ledger version 1) and the shapes diagnosis checks it against.

The DDL below is the single source of truth: the fresh baseline executes it, the fast
diagnosis path compares the stored ``sqlite_master.sql`` text with it, and the detailed
diagnosis reads the expected columns, foreign keys and indexes back from it
(:func:`expected_shape`).
"""

from __future__ import annotations

APPLICATION_ID = 1128351288  # ASCII "CAF8"
HEAD_VERSION = 1
LEDGER_TABLE = "refinery_schema_history"

TABLES: dict[str, str] = {
    "fleets": (
        "CREATE TABLE fleets (\n"
        "    fleet_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,\n"
        "    name TEXT,\n"
        "    created_at TEXT NOT NULL,\n"
        "    deleted_at TEXT,\n"
        "    director_member_id INTEGER REFERENCES members(member_id) ON DELETE RESTRICT\n"
        ")"
    ),
    "members": (
        "CREATE TABLE members (\n"
        "    member_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,\n"
        "    fleet_id INTEGER NOT NULL REFERENCES fleets(fleet_id) ON DELETE RESTRICT,\n"
        "    name TEXT NOT NULL,\n"
        "    description TEXT NOT NULL,\n"
        "    status TEXT NOT NULL,\n"
        "    registered_at TEXT NOT NULL,\n"
        "    deregistered_at TEXT\n"
        ")"
    ),
    "member_placements": (
        "CREATE TABLE member_placements (\n"
        "    member_id INTEGER NOT NULL PRIMARY KEY REFERENCES members(member_id) ON DELETE CASCADE,\n"
        "    mux_session TEXT NOT NULL,\n"
        "    mux_window_id TEXT NOT NULL,\n"
        "    mux_pane_id TEXT,\n"
        "    backend TEXT NOT NULL DEFAULT 'tmux',\n"
        "    coding_agent TEXT NOT NULL,\n"
        "    created_at TEXT NOT NULL\n"
        ")"
    ),
    "messages": (
        "CREATE TABLE messages (\n"
        "    message_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,\n"
        "    from_member_id INTEGER NOT NULL REFERENCES members(member_id) ON DELETE RESTRICT,\n"
        "    to_member_id INTEGER NOT NULL REFERENCES members(member_id) ON DELETE RESTRICT,\n"
        "    created_at TEXT NOT NULL,\n"
        "    status_state TEXT NOT NULL,\n"
        "    status_timestamp TEXT NOT NULL,\n"
        "    text TEXT NOT NULL,\n"
        "    notified_at TEXT\n"
        ")"
    ),
    "asset_installs": (
        "CREATE TABLE asset_installs (\n"
        "    coding_agent TEXT NOT NULL,\n"
        "    path TEXT NOT NULL,\n"
        "    cafleet_version TEXT NOT NULL,\n"
        "    installed_at TEXT NOT NULL,\n"
        "    PRIMARY KEY (coding_agent, path)\n"
        ")"
    ),
    LEDGER_TABLE: (
        "CREATE TABLE refinery_schema_history (\n"
        "    version INT4 PRIMARY KEY,\n"
        "    name VARCHAR(255),\n"
        "    applied_on VARCHAR(255),\n"
        "    checksum VARCHAR(255)\n"
        ")"
    ),
}

INDEXES: dict[str, str] = {
    "idx_members_fleet_status": "CREATE INDEX idx_members_fleet_status ON members (fleet_id, status)",
    "idx_messages_to_member_status_ts": (
        "CREATE INDEX idx_messages_to_member_status_ts ON messages (to_member_id, status_timestamp)"
    ),
    "idx_messages_from_member_status_ts": (
        "CREATE INDEX idx_messages_from_member_status_ts ON messages (from_member_id, status_timestamp)"
    ),
}

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
AUX_INDEXES: dict[str, str] = {
    "idx_cafleet_aux_messages_pending": (
        "CREATE INDEX idx_cafleet_aux_messages_pending ON messages (to_member_id, status_timestamp) "
        "WHERE status_state != 'completed'"
    ),
}


# cafleet's auxiliary tables: like the auxiliary indexes, outside the format (the seed allows
# unrelated auxiliary tables), created by the first write that needs one (`member create`,
# `fleet budget`), in a transaction of its own, or by `cafleet setup`; every command works on
# a file without them, and `cafleet doctor` reports one missing or with another definition.
# PostgreSQL's translation is postgres.AUX_TABLES.
#
# cafleet_aux_member_usage_sources: what ties a member to its coding agent's own usage
# records (docs/usage.md), written by `member create`: the agent, the session id cafleet
# chose (claude's --session-id), the agent's config/data folder, the pane's working
# directory and the spawn time (opencode's sessions are matched on these), and the
# member's budgets.
AUX_TABLES: dict[str, str] = {
    "cafleet_aux_member_usage_sources": (
        "CREATE TABLE cafleet_aux_member_usage_sources (\n"
        "    member_id INTEGER NOT NULL PRIMARY KEY,\n"
        "    coding_agent TEXT NOT NULL,\n"
        "    session_id TEXT,\n"
        "    data_dir TEXT,\n"
        "    cwd TEXT NOT NULL,\n"
        "    started_at TEXT NOT NULL,\n"
        "    budget_usd REAL,\n"
        "    budget_tokens INTEGER\n"
        ")"
    ),
    # cafleet_aux_notices: the notices the fleet keeper put in its Director's inbox
    # (docs/delivery.md, "Notices in the Director's inbox"): one row per notice, naming its
    # message (a self-send of the Director), its kind, what it is about (`member:5`,
    # `host:box`) and the dialog's digest; `cleared_at` is set when the condition cleared
    # (the episode ended, so the next one gets a notice of its own).
    "cafleet_aux_notices": (
        "CREATE TABLE cafleet_aux_notices (\n"
        "    message_id INTEGER NOT NULL PRIMARY KEY,\n"
        "    fleet_id INTEGER NOT NULL,\n"
        "    kind TEXT NOT NULL,\n"
        "    subject TEXT NOT NULL,\n"
        "    member_id INTEGER,\n"
        "    digest TEXT,\n"
        "    opened_at TEXT NOT NULL,\n"
        "    cleared_at TEXT\n"
        ")"
    ),
    # cafleet_aux_fleet_budgets: a fleet's budget (`cafleet fleet budget`), over all its members.
    "cafleet_aux_fleet_budgets": (
        "CREATE TABLE cafleet_aux_fleet_budgets (\n"
        "    fleet_id INTEGER NOT NULL PRIMARY KEY,\n"
        "    budget_usd REAL,\n"
        "    budget_tokens INTEGER\n"
        ")"
    ),
    # cafleet_aux_member_usage_totals: each member's usage as last read from its agent's
    # records (docs/usage.md, "Stored totals"), kept current by the fleet keeper (or `fleet
    # watch`): the totals by model as JSON, and where each file's reading stopped (its
    # identity, size and offset) so that the next read parses only what was appended. The
    # budget gate, the WebUI and `fleet watch` read this row, never the agent's files.
    "cafleet_aux_member_usage_totals": (
        "CREATE TABLE cafleet_aux_member_usage_totals (\n"
        "    member_id INTEGER NOT NULL PRIMARY KEY,\n"
        "    updated_at TEXT NOT NULL,\n"
        "    totals TEXT NOT NULL,\n"
        "    state TEXT NOT NULL\n"
        ")"
    ),
    # cafleet_aux_member_worktrees: a member's own git worktree (`member create --worktree`,
    # docs/worktrees.md): the repository (its main worktree's folder), the worktree's path
    # (never another member's: UNIQUE, and rows are kept after removal), its branch, the
    # base as given and the commit it resolved to, and where it stands (adding, ready,
    # kept after the member's deletion, removed), and the host it is on (NULL: this machine).
    "cafleet_aux_member_worktrees": (
        "CREATE TABLE cafleet_aux_member_worktrees (\n"
        "    member_id INTEGER NOT NULL PRIMARY KEY,\n"
        "    repo TEXT NOT NULL,\n"
        "    path TEXT NOT NULL UNIQUE,\n"
        "    branch TEXT NOT NULL,\n"
        "    base TEXT NOT NULL,\n"
        "    base_commit TEXT NOT NULL,\n"
        "    status TEXT NOT NULL,\n"
        "    created_at TEXT NOT NULL,\n"
        "    removed_at TEXT,\n"
        "    host TEXT\n"
        ")"
    ),
    # cafleet_aux_fleet_worktrees: a fleet whose members get a worktree unless told
    # otherwise (`fleet create --worktrees`).
    "cafleet_aux_fleet_worktrees": (
        "CREATE TABLE cafleet_aux_fleet_worktrees (\n"
        "    fleet_id INTEGER NOT NULL PRIMARY KEY,\n"
        "    worktrees INTEGER NOT NULL\n"
        ")"
    ),
}


# cafleet_aux_execs: the commands the Director runs in a member's pane (`cafleet member
# exec`, docs/delivery.md, "Commands run in a member's pane"): the member and the Director
# it is run for, the command's text (never typed: the pane gets a line naming only the id),
# when it was created, dispatched (the line typed into the member's pane), started (claimed
# by `member exec-run`, once) and finished, who runs it (host, pid and start time: whether
# it vanished), its exit status (128 + N for signal N), how it ended (NULL while in flight:
# finished, never_started, vanished), the notice that told the Director and when the member
# was told to go on with the output (the grace period's nudge). Declared apart from the
# tables above so that it moves as one piece.
AUX_TABLES["cafleet_aux_execs"] = (
    "CREATE TABLE cafleet_aux_execs (\n"
    "    exec_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,\n"
    "    fleet_id INTEGER NOT NULL,\n"
    "    member_id INTEGER NOT NULL,\n"
    "    director_id INTEGER NOT NULL,\n"
    "    command TEXT NOT NULL,\n"
    "    created_at TEXT NOT NULL,\n"
    "    dispatched_at TEXT,\n"
    "    started_at TEXT,\n"
    "    runner TEXT,\n"
    "    finished_at TEXT,\n"
    "    exit_status INTEGER,\n"
    "    outcome TEXT,\n"
    "    notice_id INTEGER,\n"
    "    nudged_at TEXT\n"
    ")"
)
# idx_cafleet_aux_execs_open: the execs that still need someone (in flight, or finished and
# the member not yet nudged: nudged_at is set once nothing more will be done), by fleet and
# member; what the drain asks before each preview and the keeper on every round, so no read
# walks the exec history.
AUX_INDEXES["idx_cafleet_aux_execs_open"] = (
    "CREATE INDEX idx_cafleet_aux_execs_open ON cafleet_aux_execs (fleet_id, member_id) WHERE nudged_at IS NULL"
)


def create_if_missing(sql: str) -> str:
    """``CREATE INDEX name`` as ``CREATE INDEX IF NOT EXISTS name`` (the stored text of an
    index created either way is the statement without IF NOT EXISTS)."""
    if sql.startswith("CREATE TABLE "):
        return sql.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1)
    return sql.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)


AUTOINCREMENT_TABLES = tuple(name for name, sql in TABLES.items() if "AUTOINCREMENT" in sql)


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
        from cafleet.store import sqlite as sqlite3

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
