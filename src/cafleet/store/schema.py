"""The baseline schema (ledger version 1) and the shapes diagnosis checks it against.

The DDL below is the single source of truth: the fresh baseline executes it, and the
fast diagnosis path compares the stored ``sqlite_master.sql`` text with it.
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
# without them is still accepted, only slower. Created with the baseline of a new file and
# by `cafleet setup` on an existing one; `cafleet doctor` reports one that is missing.
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


def create_if_missing(sql: str) -> str:
    """``CREATE INDEX name`` as ``CREATE INDEX IF NOT EXISTS name`` (the stored text of an
    index created either way is the statement without IF NOT EXISTS)."""
    return sql.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)


# Shapes for the detailed diagnosis (used when the fast text comparison does not match,
# e.g. an equivalent schema written differently, or a damaged one whose first broken
# part must be named).
# column: (name, declared type, notnull, default, pk position)
COLUMNS: dict[str, tuple[tuple[str, str, int, str | None, int], ...]] = {
    "fleets": (
        ("fleet_id", "INTEGER", 1, None, 1),
        ("name", "TEXT", 0, None, 0),
        ("created_at", "TEXT", 1, None, 0),
        ("deleted_at", "TEXT", 0, None, 0),
        ("director_member_id", "INTEGER", 0, None, 0),
    ),
    "members": (
        ("member_id", "INTEGER", 1, None, 1),
        ("fleet_id", "INTEGER", 1, None, 0),
        ("name", "TEXT", 1, None, 0),
        ("description", "TEXT", 1, None, 0),
        ("status", "TEXT", 1, None, 0),
        ("registered_at", "TEXT", 1, None, 0),
        ("deregistered_at", "TEXT", 0, None, 0),
    ),
    "member_placements": (
        ("member_id", "INTEGER", 1, None, 1),
        ("mux_session", "TEXT", 1, None, 0),
        ("mux_window_id", "TEXT", 1, None, 0),
        ("mux_pane_id", "TEXT", 0, None, 0),
        ("backend", "TEXT", 1, "'tmux'", 0),
        ("coding_agent", "TEXT", 1, None, 0),
        ("created_at", "TEXT", 1, None, 0),
    ),
    "messages": (
        ("message_id", "INTEGER", 1, None, 1),
        ("from_member_id", "INTEGER", 1, None, 0),
        ("to_member_id", "INTEGER", 1, None, 0),
        ("created_at", "TEXT", 1, None, 0),
        ("status_state", "TEXT", 1, None, 0),
        ("status_timestamp", "TEXT", 1, None, 0),
        ("text", "TEXT", 1, None, 0),
        ("notified_at", "TEXT", 0, None, 0),
    ),
    "asset_installs": (
        ("coding_agent", "TEXT", 1, None, 1),
        ("path", "TEXT", 1, None, 2),
        ("cafleet_version", "TEXT", 1, None, 0),
        ("installed_at", "TEXT", 1, None, 0),
    ),
    LEDGER_TABLE: (
        ("version", "INT4", 0, None, 1),
        ("name", "VARCHAR(255)", 0, None, 0),
        ("applied_on", "VARCHAR(255)", 0, None, 0),
        ("checksum", "VARCHAR(255)", 0, None, 0),
    ),
}

AUTOINCREMENT_TABLES = ("fleets", "members", "messages")

# foreign key: (from column, parent table, parent column, on delete)
FOREIGN_KEYS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "fleets": (("director_member_id", "members", "member_id", "RESTRICT"),),
    "members": (("fleet_id", "fleets", "fleet_id", "RESTRICT"),),
    "member_placements": (("member_id", "members", "member_id", "CASCADE"),),
    "messages": (
        ("from_member_id", "members", "member_id", "RESTRICT"),
        ("to_member_id", "members", "member_id", "RESTRICT"),
    ),
    "asset_installs": (),
    LEDGER_TABLE: (),
}

# index name: (table, columns)
INDEX_COLUMNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "idx_members_fleet_status": ("members", ("fleet_id", "status")),
    "idx_messages_to_member_status_ts": ("messages", ("to_member_id", "status_timestamp")),
    "idx_messages_from_member_status_ts": ("messages", ("from_member_id", "status_timestamp")),
}


def baseline_checksum() -> str:
    """A stable checksum of the baseline DDL, recorded in the ledger row."""
    import hashlib

    digest = hashlib.sha256()
    for sql in (*TABLES.values(), *INDEXES.values()):
        digest.update(sql.encode())
        digest.update(b";\n")
    return digest.hexdigest()[:16]
