"""The schema is declared once, as data (store/schema.py), and each engine's DDL and
expected catalogue shape are rendered from that declaration. The expected values below
are the DDL text both engines executed before the declaration existed, copied verbatim:
a rendering that drifts by one character would make every existing database fail the
fast diagnosis (SQLite compares the stored text; PostgreSQL an MD5 of the catalogue)."""

from __future__ import annotations

from cafleet.store import postgres, schema

SQLITE_TABLES = {
    "fleets": "CREATE TABLE fleets (\n"
    "    fleet_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,\n"
    "    name TEXT,\n"
    "    created_at TEXT NOT NULL,\n"
    "    deleted_at TEXT,\n"
    "    director_member_id INTEGER REFERENCES members(member_id) ON DELETE RESTRICT\n"
    ")",
    "members": "CREATE TABLE members (\n"
    "    member_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,\n"
    "    fleet_id INTEGER NOT NULL REFERENCES fleets(fleet_id) ON DELETE RESTRICT,\n"
    "    name TEXT NOT NULL,\n"
    "    description TEXT NOT NULL,\n"
    "    status TEXT NOT NULL,\n"
    "    registered_at TEXT NOT NULL,\n"
    "    deregistered_at TEXT\n"
    ")",
    "member_placements": "CREATE TABLE member_placements (\n"
    "    member_id INTEGER NOT NULL PRIMARY KEY REFERENCES members(member_id) ON DELETE "
    "CASCADE,\n"
    "    mux_session TEXT NOT NULL,\n"
    "    mux_window_id TEXT NOT NULL,\n"
    "    mux_pane_id TEXT,\n"
    "    backend TEXT NOT NULL DEFAULT 'tmux',\n"
    "    coding_agent TEXT NOT NULL,\n"
    "    created_at TEXT NOT NULL\n"
    ")",
    "messages": "CREATE TABLE messages (\n"
    "    message_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,\n"
    "    from_member_id INTEGER NOT NULL REFERENCES members(member_id) ON DELETE RESTRICT,\n"
    "    to_member_id INTEGER NOT NULL REFERENCES members(member_id) ON DELETE RESTRICT,\n"
    "    created_at TEXT NOT NULL,\n"
    "    status_state TEXT NOT NULL,\n"
    "    status_timestamp TEXT NOT NULL,\n"
    "    text TEXT NOT NULL,\n"
    "    notified_at TEXT\n"
    ")",
    "asset_installs": "CREATE TABLE asset_installs (\n"
    "    coding_agent TEXT NOT NULL,\n"
    "    path TEXT NOT NULL,\n"
    "    cafleet_version TEXT NOT NULL,\n"
    "    installed_at TEXT NOT NULL,\n"
    "    PRIMARY KEY (coding_agent, path)\n"
    ")",
    "refinery_schema_history": "CREATE TABLE refinery_schema_history (\n"
    "    version INT4 PRIMARY KEY,\n"
    "    name VARCHAR(255),\n"
    "    applied_on VARCHAR(255),\n"
    "    checksum VARCHAR(255)\n"
    ")",
}

SQLITE_INDEXES = {
    "idx_members_fleet_status": "CREATE INDEX idx_members_fleet_status ON members (fleet_id, status)",
    "idx_messages_to_member_status_ts": "CREATE INDEX idx_messages_to_member_status_ts ON messages "
    "(to_member_id, status_timestamp)",
    "idx_messages_from_member_status_ts": "CREATE INDEX idx_messages_from_member_status_ts ON messages "
    "(from_member_id, status_timestamp)",
}

SQLITE_AUX_TABLES = {
    "cafleet_aux_member_usage_sources": "CREATE TABLE cafleet_aux_member_usage_sources (\n"
    "    member_id INTEGER NOT NULL PRIMARY KEY,\n"
    "    coding_agent TEXT NOT NULL,\n"
    "    session_id TEXT,\n"
    "    data_dir TEXT,\n"
    "    cwd TEXT NOT NULL,\n"
    "    started_at TEXT NOT NULL,\n"
    "    budget_usd REAL,\n"
    "    budget_tokens INTEGER\n"
    ")",
    "cafleet_aux_notices": "CREATE TABLE cafleet_aux_notices (\n"
    "    message_id INTEGER NOT NULL PRIMARY KEY,\n"
    "    fleet_id INTEGER NOT NULL,\n"
    "    kind TEXT NOT NULL,\n"
    "    subject TEXT NOT NULL,\n"
    "    member_id INTEGER,\n"
    "    digest TEXT,\n"
    "    opened_at TEXT NOT NULL,\n"
    "    cleared_at TEXT\n"
    ")",
    "cafleet_aux_fleet_budgets": "CREATE TABLE cafleet_aux_fleet_budgets (\n"
    "    fleet_id INTEGER NOT NULL PRIMARY KEY,\n"
    "    budget_usd REAL,\n"
    "    budget_tokens INTEGER\n"
    ")",
    "cafleet_aux_member_usage_totals": "CREATE TABLE cafleet_aux_member_usage_totals (\n"
    "    member_id INTEGER NOT NULL PRIMARY KEY,\n"
    "    updated_at TEXT NOT NULL,\n"
    "    totals TEXT NOT NULL,\n"
    "    state TEXT NOT NULL\n"
    ")",
    "cafleet_aux_member_worktrees": "CREATE TABLE cafleet_aux_member_worktrees (\n"
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
    ")",
    "cafleet_aux_fleet_worktrees": "CREATE TABLE cafleet_aux_fleet_worktrees (\n"
    "    fleet_id INTEGER NOT NULL PRIMARY KEY,\n"
    "    worktrees INTEGER NOT NULL\n"
    ")",
    "cafleet_aux_member_spawns": "CREATE TABLE cafleet_aux_member_spawns (\n"
    "    member_id INTEGER NOT NULL PRIMARY KEY,\n"
    "    model TEXT,\n"
    "    effort TEXT,\n"
    "    prompt TEXT NOT NULL,\n"
    "    cwd TEXT,\n"
    "    session_id TEXT\n"
    ")",
    "cafleet_aux_fleet_notify": "CREATE TABLE cafleet_aux_fleet_notify (\n"
    "    fleet_id INTEGER NOT NULL,\n"
    "    url TEXT NOT NULL,\n"
    "    PRIMARY KEY (fleet_id, url)\n"
    ")",
    "cafleet_aux_notice_posts": "CREATE TABLE cafleet_aux_notice_posts (\n"
    "    fleet_id INTEGER NOT NULL,\n"
    "    message_id INTEGER NOT NULL,\n"
    "    url_key TEXT NOT NULL,\n"
    "    state TEXT NOT NULL,\n"
    "    attempts INTEGER NOT NULL,\n"
    "    next_try_at TEXT,\n"
    "    posted_at TEXT,\n"
    "    failed_at TEXT,\n"
    "    last_error TEXT,\n"
    "    PRIMARY KEY (fleet_id, message_id, url_key)\n"
    ")",
    "cafleet_aux_execs": "CREATE TABLE cafleet_aux_execs (\n"
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
    ")",
    "cafleet_aux_fleet_revive": "CREATE TABLE cafleet_aux_fleet_revive (\n"
    "    fleet_id INTEGER NOT NULL PRIMARY KEY,\n"
    "    per_hour INTEGER NOT NULL\n"
    ")",
    "cafleet_aux_revivals": "CREATE TABLE cafleet_aux_revivals (\n"
    "    revival_id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,\n"
    "    fleet_id INTEGER NOT NULL,\n"
    "    member_id INTEGER NOT NULL,\n"
    "    at TEXT NOT NULL,\n"
    "    actor TEXT NOT NULL,\n"
    "    outcome TEXT NOT NULL\n"
    ")",
    "cafleet_aux_fleet_placement": "CREATE TABLE cafleet_aux_fleet_placement (\n"
    "    fleet_id INTEGER NOT NULL PRIMARY KEY,\n"
    "    placement TEXT NOT NULL\n"
    ")",
}

SQLITE_AUX_INDEXES = {
    "idx_cafleet_aux_messages_pending": "CREATE INDEX idx_cafleet_aux_messages_pending ON messages "
    "(to_member_id, status_timestamp) WHERE status_state != 'completed'",
    "idx_cafleet_aux_execs_open": "CREATE INDEX idx_cafleet_aux_execs_open ON cafleet_aux_execs (fleet_id, member_id) "
    "WHERE nudged_at IS NULL",
    "idx_cafleet_aux_revivals_member": "CREATE INDEX idx_cafleet_aux_revivals_member ON cafleet_aux_revivals "
    "(member_id, revival_id)",
}

PG_TABLES = {
    "fleets": "CREATE TABLE fleets (\n"
    "    fleet_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n"
    "    name TEXT,\n"
    "    created_at TEXT NOT NULL,\n"
    "    deleted_at TEXT,\n"
    "    director_member_id BIGINT\n"
    ")",
    "members": "CREATE TABLE members (\n"
    "    member_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n"
    "    fleet_id BIGINT NOT NULL REFERENCES fleets(fleet_id) ON DELETE RESTRICT,\n"
    "    name TEXT NOT NULL,\n"
    "    description TEXT NOT NULL,\n"
    "    status TEXT NOT NULL,\n"
    "    registered_at TEXT NOT NULL,\n"
    "    deregistered_at TEXT\n"
    ")",
    "member_placements": "CREATE TABLE member_placements (\n"
    "    member_id BIGINT NOT NULL PRIMARY KEY REFERENCES members(member_id) ON DELETE "
    "CASCADE,\n"
    "    mux_session TEXT NOT NULL,\n"
    "    mux_window_id TEXT NOT NULL,\n"
    "    mux_pane_id TEXT,\n"
    "    backend TEXT NOT NULL DEFAULT 'tmux',\n"
    "    coding_agent TEXT NOT NULL,\n"
    "    created_at TEXT NOT NULL\n"
    ")",
    "messages": "CREATE TABLE messages (\n"
    "    message_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n"
    "    from_member_id BIGINT NOT NULL REFERENCES members(member_id) ON DELETE RESTRICT,\n"
    "    to_member_id BIGINT NOT NULL REFERENCES members(member_id) ON DELETE RESTRICT,\n"
    "    created_at TEXT NOT NULL,\n"
    "    status_state TEXT NOT NULL,\n"
    "    status_timestamp TEXT NOT NULL,\n"
    "    text TEXT NOT NULL,\n"
    "    notified_at TEXT\n"
    ")",
    "asset_installs": "CREATE TABLE asset_installs (\n"
    "    coding_agent TEXT NOT NULL,\n"
    "    path TEXT NOT NULL,\n"
    "    cafleet_version TEXT NOT NULL,\n"
    "    installed_at TEXT NOT NULL,\n"
    "    PRIMARY KEY (coding_agent, path)\n"
    ")",
    "refinery_schema_history": "CREATE TABLE refinery_schema_history (\n"
    "    version INTEGER PRIMARY KEY,\n"
    "    name VARCHAR(255),\n"
    "    applied_on VARCHAR(255),\n"
    "    checksum VARCHAR(255)\n"
    ")",
}

PG_LATE_FOREIGN_KEYS = (
    "ALTER TABLE fleets ADD CONSTRAINT fleets_director_member_id_fkey FOREIGN KEY (director_member_id) "
    "REFERENCES members(member_id) ON DELETE RESTRICT",
)

PG_AUX_TABLES = {
    "cafleet_aux_member_usage_sources": "CREATE TABLE cafleet_aux_member_usage_sources (\n"
    "    member_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    coding_agent TEXT NOT NULL,\n"
    "    session_id TEXT,\n"
    "    data_dir TEXT,\n"
    "    cwd TEXT NOT NULL,\n"
    "    started_at TEXT NOT NULL,\n"
    "    budget_usd DOUBLE PRECISION,\n"
    "    budget_tokens BIGINT\n"
    ")",
    "cafleet_aux_notices": "CREATE TABLE cafleet_aux_notices (\n"
    "    message_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    fleet_id BIGINT NOT NULL,\n"
    "    kind TEXT NOT NULL,\n"
    "    subject TEXT NOT NULL,\n"
    "    member_id BIGINT,\n"
    "    digest TEXT,\n"
    "    opened_at TEXT NOT NULL,\n"
    "    cleared_at TEXT\n"
    ")",
    "cafleet_aux_fleet_budgets": "CREATE TABLE cafleet_aux_fleet_budgets (\n"
    "    fleet_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    budget_usd DOUBLE PRECISION,\n"
    "    budget_tokens BIGINT\n"
    ")",
    "cafleet_aux_member_usage_totals": "CREATE TABLE cafleet_aux_member_usage_totals (\n"
    "    member_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    updated_at TEXT NOT NULL,\n"
    "    totals TEXT NOT NULL,\n"
    "    state TEXT NOT NULL\n"
    ")",
    "cafleet_aux_member_worktrees": "CREATE TABLE cafleet_aux_member_worktrees (\n"
    "    member_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    repo TEXT NOT NULL,\n"
    "    path TEXT NOT NULL UNIQUE,\n"
    "    branch TEXT NOT NULL,\n"
    "    base TEXT NOT NULL,\n"
    "    base_commit TEXT NOT NULL,\n"
    "    status TEXT NOT NULL,\n"
    "    created_at TEXT NOT NULL,\n"
    "    removed_at TEXT,\n"
    "    host TEXT\n"
    ")",
    "cafleet_aux_fleet_worktrees": "CREATE TABLE cafleet_aux_fleet_worktrees (\n"
    "    fleet_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    worktrees BIGINT NOT NULL\n"
    ")",
    "cafleet_aux_member_spawns": "CREATE TABLE cafleet_aux_member_spawns (\n"
    "    member_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    model TEXT,\n"
    "    effort TEXT,\n"
    "    prompt TEXT NOT NULL,\n"
    "    cwd TEXT,\n"
    "    session_id TEXT\n"
    ")",
    "cafleet_aux_fleet_notify": "CREATE TABLE cafleet_aux_fleet_notify (\n"
    "    fleet_id BIGINT NOT NULL,\n"
    "    url TEXT NOT NULL,\n"
    "    PRIMARY KEY (fleet_id, url)\n"
    ")",
    "cafleet_aux_notice_posts": "CREATE TABLE cafleet_aux_notice_posts (\n"
    "    fleet_id BIGINT NOT NULL,\n"
    "    message_id BIGINT NOT NULL,\n"
    "    url_key TEXT NOT NULL,\n"
    "    state TEXT NOT NULL,\n"
    "    attempts BIGINT NOT NULL,\n"
    "    next_try_at TEXT,\n"
    "    posted_at TEXT,\n"
    "    failed_at TEXT,\n"
    "    last_error TEXT,\n"
    "    PRIMARY KEY (fleet_id, message_id, url_key)\n"
    ")",
    "cafleet_aux_execs": "CREATE TABLE cafleet_aux_execs (\n"
    "    exec_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n"
    "    fleet_id BIGINT NOT NULL,\n"
    "    member_id BIGINT NOT NULL,\n"
    "    director_id BIGINT NOT NULL,\n"
    "    command TEXT NOT NULL,\n"
    "    created_at TEXT NOT NULL,\n"
    "    dispatched_at TEXT,\n"
    "    started_at TEXT,\n"
    "    runner TEXT,\n"
    "    finished_at TEXT,\n"
    "    exit_status BIGINT,\n"
    "    outcome TEXT,\n"
    "    notice_id BIGINT,\n"
    "    nudged_at TEXT\n"
    ")",
    "cafleet_aux_fleet_revive": "CREATE TABLE cafleet_aux_fleet_revive (\n"
    "    fleet_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    per_hour BIGINT NOT NULL\n"
    ")",
    "cafleet_aux_revivals": "CREATE TABLE cafleet_aux_revivals (\n"
    "    revival_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n"
    "    fleet_id BIGINT NOT NULL,\n"
    "    member_id BIGINT NOT NULL,\n"
    "    at TEXT NOT NULL,\n"
    "    actor TEXT NOT NULL,\n"
    "    outcome TEXT NOT NULL\n"
    ")",
    "cafleet_aux_fleet_placement": "CREATE TABLE cafleet_aux_fleet_placement (\n"
    "    fleet_id BIGINT NOT NULL PRIMARY KEY,\n"
    "    placement TEXT NOT NULL\n"
    ")",
}

PG_EXPECTED_COLUMNS = {
    "fleets": (
        "fleet_id bigint NOT NULL identity",
        "name text",
        "created_at text NOT NULL",
        "deleted_at text",
        "director_member_id bigint",
    ),
    "members": (
        "member_id bigint NOT NULL identity",
        "fleet_id bigint NOT NULL",
        "name text NOT NULL",
        "description text NOT NULL",
        "status text NOT NULL",
        "registered_at text NOT NULL",
        "deregistered_at text",
    ),
    "member_placements": (
        "member_id bigint NOT NULL",
        "mux_session text NOT NULL",
        "mux_window_id text NOT NULL",
        "mux_pane_id text",
        "backend text NOT NULL DEFAULT 'tmux'::text",
        "coding_agent text NOT NULL",
        "created_at text NOT NULL",
    ),
    "messages": (
        "message_id bigint NOT NULL identity",
        "from_member_id bigint NOT NULL",
        "to_member_id bigint NOT NULL",
        "created_at text NOT NULL",
        "status_state text NOT NULL",
        "status_timestamp text NOT NULL",
        "text text NOT NULL",
        "notified_at text",
    ),
    "asset_installs": (
        "coding_agent text NOT NULL",
        "path text NOT NULL",
        "cafleet_version text NOT NULL",
        "installed_at text NOT NULL",
    ),
    "refinery_schema_history": (
        "version integer NOT NULL",
        "name character varying(255)",
        "applied_on character varying(255)",
        "checksum character varying(255)",
    ),
}

PG_EXPECTED_CONSTRAINTS = {
    "fleets": (
        "PRIMARY KEY (fleet_id)",
        "FOREIGN KEY (director_member_id) REFERENCES members(member_id) ON DELETE RESTRICT",
    ),
    "members": ("PRIMARY KEY (member_id)", "FOREIGN KEY (fleet_id) REFERENCES fleets(fleet_id) ON DELETE RESTRICT"),
    "member_placements": (
        "PRIMARY KEY (member_id)",
        "FOREIGN KEY (member_id) REFERENCES members(member_id) ON DELETE CASCADE",
    ),
    "messages": (
        "PRIMARY KEY (message_id)",
        "FOREIGN KEY (from_member_id) REFERENCES members(member_id) ON DELETE RESTRICT",
        "FOREIGN KEY (to_member_id) REFERENCES members(member_id) ON DELETE RESTRICT",
    ),
    "asset_installs": ("PRIMARY KEY (coding_agent, path)",),
    "refinery_schema_history": ("PRIMARY KEY (version)",),
}

PG_EXPECTED_AUX_COLUMNS = {
    "cafleet_aux_member_usage_sources": (
        "member_id bigint NOT NULL",
        "coding_agent text NOT NULL",
        "session_id text",
        "data_dir text",
        "cwd text NOT NULL",
        "started_at text NOT NULL",
        "budget_usd double precision",
        "budget_tokens bigint",
    ),
    "cafleet_aux_notices": (
        "message_id bigint NOT NULL",
        "fleet_id bigint NOT NULL",
        "kind text NOT NULL",
        "subject text NOT NULL",
        "member_id bigint",
        "digest text",
        "opened_at text NOT NULL",
        "cleared_at text",
    ),
    "cafleet_aux_fleet_budgets": ("fleet_id bigint NOT NULL", "budget_usd double precision", "budget_tokens bigint"),
    "cafleet_aux_member_usage_totals": (
        "member_id bigint NOT NULL",
        "updated_at text NOT NULL",
        "totals text NOT NULL",
        "state text NOT NULL",
    ),
    "cafleet_aux_member_worktrees": (
        "member_id bigint NOT NULL",
        "repo text NOT NULL",
        "path text NOT NULL",
        "branch text NOT NULL",
        "base text NOT NULL",
        "base_commit text NOT NULL",
        "status text NOT NULL",
        "created_at text NOT NULL",
        "removed_at text",
        "host text",
    ),
    "cafleet_aux_fleet_worktrees": ("fleet_id bigint NOT NULL", "worktrees bigint NOT NULL"),
    "cafleet_aux_member_spawns": (
        "member_id bigint NOT NULL",
        "model text",
        "effort text",
        "prompt text NOT NULL",
        "cwd text",
        "session_id text",
    ),
    "cafleet_aux_fleet_notify": ("fleet_id bigint NOT NULL", "url text NOT NULL"),
    "cafleet_aux_notice_posts": (
        "fleet_id bigint NOT NULL",
        "message_id bigint NOT NULL",
        "url_key text NOT NULL",
        "state text NOT NULL",
        "attempts bigint NOT NULL",
        "next_try_at text",
        "posted_at text",
        "failed_at text",
        "last_error text",
    ),
    "cafleet_aux_execs": (
        "exec_id bigint NOT NULL identity",
        "fleet_id bigint NOT NULL",
        "member_id bigint NOT NULL",
        "director_id bigint NOT NULL",
        "command text NOT NULL",
        "created_at text NOT NULL",
        "dispatched_at text",
        "started_at text",
        "runner text",
        "finished_at text",
        "exit_status bigint",
        "outcome text",
        "notice_id bigint",
        "nudged_at text",
    ),
    "cafleet_aux_fleet_revive": (
        "fleet_id bigint NOT NULL",
        "per_hour bigint NOT NULL",
    ),
    "cafleet_aux_revivals": (
        "revival_id bigint NOT NULL identity",
        "fleet_id bigint NOT NULL",
        "member_id bigint NOT NULL",
        "at text NOT NULL",
        "actor text NOT NULL",
        "outcome text NOT NULL",
    ),
    "cafleet_aux_fleet_placement": (
        "fleet_id bigint NOT NULL",
        "placement text NOT NULL",
    ),
}

PG_EXPECTED_INDEXES = {
    "idx_members_fleet_status": "members (fleet_id, status)",
    "idx_messages_to_member_status_ts": "messages (to_member_id, status_timestamp)",
    "idx_messages_from_member_status_ts": "messages (from_member_id, status_timestamp)",
}

BASELINE_CHECKSUM = "7944abfae9024abf"

PG_BASELINE_DIGEST = "470cbeb5a88792a55f2a5ed8d687499c"

AUTOINCREMENT_TABLES = ("fleets", "members", "messages")


def test_each_engines_ddl_rendered_from_the_one_declaration_is_todays_text():
    sqlite = schema.render(schema.SQLITE)
    assert sqlite.tables == SQLITE_TABLES
    assert sqlite.late_foreign_keys == ()
    assert sqlite.indexes == SQLITE_INDEXES
    assert sqlite.aux_tables == SQLITE_AUX_TABLES
    assert sqlite.aux_indexes == SQLITE_AUX_INDEXES
    pg = schema.render(schema.POSTGRES)
    assert pg.tables == PG_TABLES
    assert pg.late_foreign_keys == PG_LATE_FOREIGN_KEYS
    assert pg.indexes == SQLITE_INDEXES  # the same statements on both engines
    assert pg.aux_tables == PG_AUX_TABLES
    assert pg.aux_indexes == SQLITE_AUX_INDEXES


def test_postgres_expected_catalogue_is_rendered_from_the_declaration_as_before():
    shape = postgres.catalogue_shape()
    assert shape.columns == PG_EXPECTED_COLUMNS
    assert shape.constraints == PG_EXPECTED_CONSTRAINTS
    assert postgres.expected_aux_columns() == PG_EXPECTED_AUX_COLUMNS
    assert shape.indexes == PG_EXPECTED_INDEXES


def test_the_stores_execute_and_check_the_rendered_text_and_its_checksums_are_unchanged():
    assert (schema.TABLES, schema.INDEXES, schema.AUX_TABLES, schema.AUX_INDEXES) == (
        SQLITE_TABLES,
        SQLITE_INDEXES,
        SQLITE_AUX_TABLES,
        SQLITE_AUX_INDEXES,
    )
    assert (postgres.TABLES, postgres.LATE_FOREIGN_KEYS, postgres.AUX_TABLES) == (
        PG_TABLES,
        PG_LATE_FOREIGN_KEYS,
        PG_AUX_TABLES,
    )
    assert (postgres.EXPECTED_COLUMNS, postgres.EXPECTED_CONSTRAINTS, postgres.EXPECTED_AUX_COLUMNS) == (
        PG_EXPECTED_COLUMNS,
        PG_EXPECTED_CONSTRAINTS,
        PG_EXPECTED_AUX_COLUMNS,
    )
    assert schema.AUTOINCREMENT_TABLES == AUTOINCREMENT_TABLES
    assert schema.baseline_checksum() == BASELINE_CHECKSUM  # the ledger rows already written
    assert postgres.baseline_digest() == PG_BASELINE_DIGEST  # the fast path's accepted shape
