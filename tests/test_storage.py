"""Storage and every row of the format diagnosis table (docs/storage.md).

Refused files must stay byte-identical: same SHA-256 and no journal/WAL files beside them.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from cafleet.errors import DatabaseError
from cafleet.store import schema
from cafleet.store.engines import open_store
from tests.conftest import file_digest


def sidecars(path) -> list[str]:
    return [s for s in ("-journal", "-wal", "-shm") if os.path.exists(str(path) + s)]


def make_cafleet_db(path) -> None:
    open_store(str(path)).close()


def assert_refused(cli, env, path, expected_fragment: str) -> None:
    before = file_digest(path)
    result = cli("message", "poll", "1", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    assert result.code == 1, result
    assert result.out == ""
    assert result.err.startswith("Error: ") and result.err.count("\n") == 1, result.err
    assert expected_fragment in result.err, result.err
    assert file_digest(path) == before
    assert sidecars(path) == []


# --- the fresh baseline --------------------------------------------------------------


def objects(conn) -> list[tuple[str, str, str]]:
    return sorted(conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall())


def test_missing_file_gets_exact_baseline(store, db_path):
    """The seed: "The fresh baseline creates exactly the application tables declared in
    the schema" (cafleet's auxiliary objects come later, where each is first needed)."""
    conn = store.conn
    expected = sorted(
        [("table", name, sql) for name, sql in schema.TABLES.items()]
        + [("index", name, sql) for name, sql in schema.INDEXES.items()]
    )
    assert objects(conn) == expected
    assert conn.execute("PRAGMA application_id").fetchone()[0] == 1128351288
    assert conn.execute("SELECT version, name FROM refinery_schema_history").fetchall() == [(1, "baseline")]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert [r[1] for r in conn.execute("PRAGMA table_info(refinery_schema_history)")] == [
        "version",
        "name",
        "applied_on",
        "checksum",
    ]


def test_auxiliaries_come_when_first_needed_and_the_file_passes_the_fast_diagnosis_either_way(
    db_path, build, store, monkeypatch
):
    """The pending index with the first fleet, the usage tables (sources and stored totals)
    with the first recorded source, the budget table with the first fleet budget, the
    spawns' table with the first member created, the worktree tables with the first worktree
    and fleet default, the placement, revival and notify tables with their first writes, the notices' table with
    the first notice, each in a transaction of its own;
    a file with all, some or none of them opens through the fast diagnosis."""
    from cafleet.broker import execs, fleets, notices, notify, revivals, spawns, usage, worktrees
    from cafleet.store import diagnosis

    def detailed(*args):
        raise AssertionError("the fast path fell back to the detailed diagnosis")

    monkeypatch.setattr(diagnosis, "check_ledger", detailed)
    seed = objects(store.conn)

    def added() -> set[str]:
        open_store(db_path).close()  # the fast path accepts it as it is now
        return {name for kind, name, sql in objects(store.conn) if (kind, name, sql) not in seed}

    assert added() == set()
    fleet_id, director, (m1, _) = build.fleet()
    assert added() == {"idx_cafleet_aux_messages_pending"}
    assert objects(store.conn) == sorted([*seed, ("index", *next(iter(schema.AUX_INDEXES.items())))])
    usage.record_source(store, m1, coding_agent="claude", session_id="s", data_dir=None, cwd="/", budget_tokens=9)
    assert added() == {  # the stored totals come with the sources (docs/usage.md)
        "idx_cafleet_aux_messages_pending",
        "cafleet_aux_member_usage_sources",
        "cafleet_aux_member_usage_totals",
    }
    usage.set_fleet_budget(store, fleet_id, None, 100)
    assert added() == {
        "idx_cafleet_aux_messages_pending",
        usage.TABLE,
        "cafleet_aux_member_usage_totals",
        usage.FLEET_TABLE,
    }
    spawns.record(store, m1, model=None, effort=None, prompt="p", cwd="/", session_id=None)  # `member create`
    worktrees.record(store, m1, repo="/r", path="/r.m1", branch="b", base="main", base_commit="0" * 40)
    worktrees.set_fleet_default(store, fleet_id, True)
    fleets.set_default_placement(store, fleet_id, "window")  # `fleet create --placement`
    revivals.set_fleet(store, fleet_id, 3)  # `fleet create --revive`
    revivals.record(store, fleet_id, m1, revivals.KEEPER, "restored")  # the keeper's first revival
    notify.set_fleet_urls(store, fleet_id, ["http://127.0.0.1:9/hook"])  # `fleet create --notify`
    notify.cursors(store, fleet_id, [notify.url_key("http://127.0.0.1:9/hook")])  # the keeper's outbox starts
    assert added() == {*schema.AUX_INDEXES, *schema.AUX_TABLES} - {notices.TABLE, execs.TABLE, execs.OPEN_INDEX}
    assert (
        notices.post(store, fleet_id, director, notices.Notice("silent", f"member:{m1}", m1, None, "[cafleet notice]"))
        is not None
    )
    assert added() == {*schema.AUX_INDEXES, *schema.AUX_TABLES} - {execs.TABLE, execs.OPEN_INDEX}
    store.execute("UPDATE member_placements SET mux_pane_id = '%3' WHERE member_id = ?", (m1,))
    execs.create(store, m1, "true")  # the first `member exec`
    assert added() == {*schema.AUX_INDEXES, *schema.AUX_TABLES}
    assert {(kind, name, sql) for kind, name, sql in objects(store.conn) if name in added()} == {
        *(("index", name, sql) for name, sql in schema.AUX_INDEXES.items()),
        *(("table", name, sql) for name, sql in schema.AUX_TABLES.items()),
    }
    assert usage.budgets_for_send(store, m1) == {"member": (None, 9), "fleet": (fleet_id, None, 100)}
    build.fleet("beta")  # the index exists: nothing more
    assert added() == {*schema.AUX_INDEXES, *schema.AUX_TABLES}
    assert store.execute("SELECT version FROM refinery_schema_history").fetchall() == [(1,)]


def test_foreign_keys_enforced_with_declared_actions(store):
    conn = store.conn
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO members (fleet_id, name, description, status, registered_at) VALUES (99, 'x', 'd', 'active', 't')"
        )
    fks = {(r[2], r[3], r[4], r[6]) for r in conn.execute("PRAGMA foreign_key_list(member_placements)")}
    assert fks == {("members", "member_id", "member_id", "CASCADE")}
    fks = {(r[2], r[3], r[6]) for r in conn.execute("PRAGMA foreign_key_list(messages)")}
    assert fks == {("members", "from_member_id", "RESTRICT"), ("members", "to_member_id", "RESTRICT")}


def test_parent_folder_created_on_first_use(cli, env, tmp_path):
    path = tmp_path / "deep" / "er" / "x.db"
    result = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=f"sqlite:///{path}"))
    assert result.code == 0, result
    assert path.exists()


def test_a_sqlite_library_older_than_the_minimum_is_one_line_and_creates_nothing(cli, env, tmp_path, monkeypatch):
    """The SQL cafleet writes needs SQLite 3.35 (``UPDATE ... RETURNING``); an older system
    library (a stand-in here: this machine's is newer) is named before anything is made."""
    from cafleet.store import sqlite_driver

    monkeypatch.setattr(sqlite_driver.driver, "sqlite_version", "3.34.1")
    path = tmp_path / "new" / "x.db"
    result = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    assert result.code == 1 and result.out == ""
    assert result.err == (
        "Error: this Python's SQLite library is 3.34.1; cafleet needs SQLite 3.35 or newer "
        "(UPDATE ... RETURNING): use a Python linked with a newer libsqlite3.\n"
    )
    assert not path.parent.exists()


def test_empty_zero_byte_file_is_initialised(cli, env, tmp_path):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    assert cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(path))).code == 0
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID


def test_empty_sqlite_file_with_zero_identity_is_initialised(cli, env, tmp_path):
    path = tmp_path / "blank.db"
    sqlite3.connect(path).execute("PRAGMA user_version=0").connection.close()
    conn = sqlite3.connect(path)
    conn.execute("VACUUM")  # materialise a valid, table-less SQLite file
    conn.close()
    if path.stat().st_size == 0:  # some builds leave it empty: write a header explicitly
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE t(x)")
        conn.execute("DROP TABLE t")
        conn.close()
    assert path.read_bytes().startswith(b"SQLite format 3\x00")
    assert cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(path))).code == 0
    assert sqlite3.connect(path).execute("SELECT count(*) FROM refinery_schema_history").fetchone()[0] == 1


# --- compatible files -------------------------------------------------------------------


def test_extra_unrelated_objects_are_compatible(cli, env, tmp_path):
    path = tmp_path / "extra.db"
    make_cafleet_db(path)
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);"
        "CREATE INDEX idx_notes_body ON notes(body);"
        "CREATE INDEX idx_messages_created ON messages(created_at);"
        "CREATE TRIGGER notes_t AFTER INSERT ON notes BEGIN SELECT 1; END;"
    )
    conn.close()
    assert cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(path))).code == 0


def test_equivalent_schema_written_differently_is_compatible(cli, env, tmp_path):
    """The detailed diagnosis accepts the same shape spelled with other whitespace/case."""
    path = tmp_path / "spelled.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
    for sql in (*schema.TABLES.values(), *schema.INDEXES.values()):
        conn.execute(sql.replace("\n    ", " ").replace("CREATE TABLE", "create table"))
    conn.execute("INSERT INTO refinery_schema_history VALUES (1, 'baseline', 'x', 'y')")
    conn.commit()
    conn.close()
    assert cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(path))).code == 0


# --- refused files (byte-identical) ---------------------------------------------------


def test_newer_ledger_is_refused_before_shape(cli, env, tmp_path):
    path = tmp_path / "newer.db"
    make_cafleet_db(path)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO refinery_schema_history VALUES (2, 'future', 'x', 'y')")
    conn.execute("DROP TABLE asset_installs")  # a shape change that must not be reported
    conn.commit()
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    assert_refused(cli, env, path, "database schema 2 is newer than this cafleet (head 1); upgrade cafleet")


@pytest.mark.parametrize(
    "damage, named",
    [
        ("DROP TABLE asset_installs", "table asset_installs is missing"),
        ("ALTER TABLE messages DROP COLUMN notified_at", "column messages.notified_at is missing"),
        ("DROP INDEX idx_messages_to_member_status_ts", "index idx_messages_to_member_status_ts"),
        ("DROP INDEX idx_members_fleet_status", "index idx_members_fleet_status"),
        ("ALTER TABLE members ADD COLUMN team TEXT NOT NULL DEFAULT 'x'", None),
    ],
)
def test_broken_shape_is_refused_naming_the_part(cli, env, tmp_path, damage, named):
    path = tmp_path / "broken.db"
    make_cafleet_db(path)
    conn = sqlite3.connect(path)
    conn.execute(damage)
    conn.commit()
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    if named is None:  # an extra column with a default is compatible
        assert cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(path))).code == 0
    else:
        assert_refused(cli, env, path, named)


def _rebuild_with(path, table: str, new_sql: str) -> None:
    """Replace one table's definition (same name, other shape) in a cafleet file."""
    make_cafleet_db(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("BEGIN")
    conn.execute(f"ALTER TABLE {table} RENAME TO old_{table}")
    conn.execute(new_sql)
    conn.execute(f"DROP TABLE old_{table}")
    conn.execute("COMMIT")
    conn.close()


def test_altered_column_type_is_named(cli, env, tmp_path):
    path = tmp_path / "type.db"
    sql = schema.TABLES["messages"].replace("text TEXT NOT NULL", "text BLOB NOT NULL")
    _rebuild_with(path, "messages", sql)
    assert_refused(cli, env, path, "column messages.text is altered (expected TEXT NOT NULL, found BLOB NOT NULL)")


def test_missing_foreign_key_is_named(cli, env, tmp_path):
    path = tmp_path / "fk.db"
    sql = schema.TABLES["member_placements"].replace(" REFERENCES members(member_id) ON DELETE CASCADE", "")
    _rebuild_with(path, "member_placements", sql)
    assert_refused(cli, env, path, "foreign key member_placements.member_id -> members.member_id ON DELETE CASCADE")


def test_lost_autoincrement_is_named(cli, env, tmp_path):
    path = tmp_path / "autoinc.db"
    sql = schema.TABLES["fleets"].replace(" AUTOINCREMENT", "")
    _rebuild_with(path, "fleets", sql)
    assert_refused(cli, env, path, "table fleets lost AUTOINCREMENT")


def test_foreign_application_id_is_refused(cli, env, tmp_path):
    path = tmp_path / "foreign.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id=42")
    conn.execute("CREATE TABLE things (x)")
    conn.commit()
    conn.close()
    assert_refused(cli, env, path, "is not a cafleet database (application_id 42)")


def test_foreign_wal_file_is_refused_without_touching_it(cli, env, tmp_path):
    path = tmp_path / "foreign-wal.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA application_id=7")
    conn.execute("CREATE TABLE things (x)")
    conn.commit()
    conn.close()
    assert sidecars(path) == []
    assert_refused(cli, env, path, "application_id 7")


def test_populated_without_ledger_is_refused(cli, env, tmp_path):
    path = tmp_path / "populated.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE fleets (fleet_id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    assert_refused(cli, env, path, "is not a cafleet database (populated, no cafleet identity or ledger)")


def test_identity_without_ledger_is_refused(cli, env, tmp_path):
    path = tmp_path / "noledger.db"
    make_cafleet_db(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE refinery_schema_history")
    conn.commit()
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    assert_refused(cli, env, path, "schema ledger refinery_schema_history is missing or damaged")


@pytest.mark.parametrize(
    "content", [b"hello, not a database\n", b"\xff\xfe\x00garbage" * 50, b"SQLite format 3\x00" + b"\x00" * 20]
)
def test_not_sqlite_is_refused(cli, env, tmp_path, content):
    path = tmp_path / "text.db"
    path.write_bytes(content)
    assert_refused(cli, env, path, "is not a SQLite database")


def test_damaged_sqlite_file_is_refused(cli, env, tmp_path):
    path = tmp_path / "damaged.db"
    make_cafleet_db(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # wreck the schema page, keep the header
    path.write_bytes(bytes(data))
    assert_refused(cli, env, path, str(path))


def test_directory_path_is_refused(cli, env, tmp_path):
    path = tmp_path / "adir.db"
    path.mkdir()
    result = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    assert result.code == 1
    assert result.err == f"Error: database path {path} is a directory, not a file.\n"


def test_locked_beyond_timeout_is_refused(cli, env, tmp_path):
    path = tmp_path / "locked.db"
    make_cafleet_db(path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3,sys,time\n"
            f"c=sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "c.execute('PRAGMA locking_mode=EXCLUSIVE'); c.execute('BEGIN EXCLUSIVE')\n"
            "c.execute('INSERT INTO asset_installs VALUES (1,2,3,4)')\n"
            "print('held', flush=True); time.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        result = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(path), CAFLEET_BUSY_TIMEOUT="0.3"))
        assert result.code == 1
        assert result.err == f"Error: database {path} is locked by another process (waited 0.3 s); try again.\n"
    finally:
        holder.kill()
        holder.wait()


# --- configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, message",
    [
        ("mysql://localhost/db", "is not supported; use sqlite:///ABS/PATH, an absolute file path or postgresql://..."),
        ("relative/path.db", "is not supported; use sqlite:///ABS/PATH, an absolute file path or postgresql://..."),
        ("sqlite:///", "must be sqlite:///ABS/PATH with a file path and no query string."),
        ("sqlite:////tmp/x.db?mode=ro", "must be sqlite:///ABS/PATH with a file path and no query string."),
    ],
)
def test_bad_database_url(cli, env, url, message):
    result = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=url))
    assert result.code == 1
    assert result.err == f"Error: CAFLEET_DATABASE_URL {url!r} {message}\n"


def test_sqlite_url_forms_resolve_to_the_same_file(env, tmp_path):
    from cafleet.config import database_location

    path = tmp_path / "same.db"
    assert database_location({"CAFLEET_DATABASE_URL": f"sqlite:///{path}"}) == str(path)
    assert database_location({"CAFLEET_DATABASE_URL": f"sqlite:////{str(path).lstrip('/')}"}) == str(path)
    assert database_location({"HOME": "/h"}) == "/h/.local/share/cafleet/cafleet_v8.db"
    assert database_location({"HOME": "/h", "XDG_DATA_HOME": "/d"}) == "/d/cafleet/cafleet_v8.db"


@pytest.mark.parametrize("form", ["plain", "sqlite:///"])
def test_a_path_through_a_symlink_and_dotdot_names_the_file_the_kernel_opens(cli, env, tmp_path, form):
    """``link/..`` is the parent of the link's target for the kernel, not the folder that
    holds the link (what a textual normalisation would make of it)."""
    from cafleet.config import database_location
    from tests.conftest import FleetBuilder

    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "link").symlink_to(tmp_path / "real" / "inner")
    kernel = tmp_path / "real" / "cafleet.db"
    spelled = f"{tmp_path}/other/link/../cafleet.db"
    url = spelled if form == "plain" else "sqlite:///" + spelled
    assert database_location({"CAFLEET_DATABASE_URL": url}) == str(kernel)
    store = open_store(str(kernel))
    FleetBuilder(store).fleet("kernel")
    store.close()
    listed = cli("fleet", "list", "--json", environ=dict(env, CAFLEET_DATABASE_URL=url))
    assert listed.code == 0, listed
    assert [fleet["name"] for fleet in listed.json()] == ["kernel"]
    assert not (tmp_path / "other" / "cafleet.db").exists()  # no second database beside the link


def test_unwritable_folder_is_a_clear_error(cli, env, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    result = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(blocker / "sub" / "x.db")))
    assert result.code == 1
    assert result.err == f"Error: cannot read database {blocker / 'sub' / 'x.db'}: Not a directory.\n"


def test_help_and_version_never_touch_the_database(cli, env, tmp_path):
    path = tmp_path / "untouched" / "x.db"
    environ = dict(env, CAFLEET_DATABASE_URL=str(path))
    for args in (["--version"], ["--help"], ["message", "send", "--help"], ["fleet", "--help"]):
        assert cli(*args, environ=environ).code == 0
    assert not path.parent.exists()


def test_concurrent_first_use_initialises_once(env, tmp_path):
    path = tmp_path / "race" / "x.db"
    # the busy timeout only bounds a failure: eight starting interpreters on a loaded machine
    environ = dict(env, CAFLEET_DATABASE_URL=str(path), CAFLEET_BUSY_TIMEOUT="120")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "cafleet", "fleet", "list", "--json"],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(8)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outputs
    assert all(out == b"[]\n" for out, _ in outputs)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM refinery_schema_history").fetchone()[0] == 1


OPEN_CLOSE_LOOP = """
import sys
from cafleet.errors import DatabaseError
from cafleet.store.engines import open_store
failures = []
for _ in range(int(sys.argv[2])):
    try:
        open_store(sys.argv[1]).close()
    except DatabaseError as error:
        failures.append(str(error))
print(len(failures), failures[:1])
"""


def test_opening_while_others_open_and_close_is_never_refused(db_path):
    """Commands that open and close the file back to back: now and then the last one to
    close removes the -wal and -shm while the next one's read-only diagnosis starts on
    them, and sees the log index half made (SQLITE_READONLY_RECOVERY). That is a moment of
    someone else's open, not a read-only file: the diagnosis tries again. Three processes,
    1,500 opens each, hit that moment most runs on an unfixed build."""
    open_store(str(db_path)).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_CLOSE_LOOP, str(db_path), "1500"], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert outputs == ["0 []\n"] * 3


def test_unknown_stored_status_is_a_clear_error(cli, build, store):
    _fleet_id, _director, (m1, m2) = build.fleet()
    store.conn.execute("UPDATE members SET status = 'zombie' WHERE member_id = ?", (m1,))
    result = cli("member", "show", str(m1))
    assert result.code == 1
    assert result.err == (
        f"Error: member {m1} has an unknown status 'zombie' in the database (expected active or deregistered); "
        "repair the row or use a newer cafleet.\n"
    )
    store.conn.execute("UPDATE members SET status = 'active' WHERE member_id = ?", (m1,))
    sent = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "hi", "--json").json()
    store.conn.execute("UPDATE messages SET status_state = 'lost' WHERE message_id = ?", (sent["message_id"],))
    result = cli("message", "show", str(sent["message_id"]))
    assert result.code == 1
    assert "has an unknown status_state 'lost'" in result.err


def test_open_store_error_type(tmp_path):
    path = tmp_path / "x.db"
    path.write_bytes(b"nope" * 100)
    with pytest.raises(DatabaseError):
        open_store(str(path))


REOPEN_SCRIPT = r"""
import subprocess, sys
from cafleet.broker import fleets, members, messages
from cafleet.store.engines import open_store
from cafleet.store.diagnosis import read_header_state

path = sys.argv[1]
store = open_store(path)
fleets.create_fleet(store, name="a", coding_agent="claude", backend="tmux", session="s", window_id="@0", pane_id="%0")
member = members.register_member(store, fleet_id=1, name="m", description="d", backend="tmux", session="s",
                                 window_id="@0", coding_agent="claude")
store.execute("SELECT count(*) FROM messages").fetchone()
read_header_state(path)  # what every further open_store in this process does first
writer = "from cafleet.store.engines import open_store; from cafleet.broker import messages; import sys\n" \
         "s = open_store(sys.argv[1]); messages.send(s, 1, 2, sys.argv[2]); s.close()"
seen = []
for body in ("first", "second"):
    subprocess.run([sys.executable, "-c", writer, path, body], check=True)
    seen.append(",".join(r[0] for r in store.execute("SELECT text FROM messages ORDER BY message_id")))
print(" ".join(seen))
"""


def test_reopening_in_one_process_keeps_its_connections_current(tmp_path):
    """Reading the header again in a process that has a connection open must not drop that
    connection's locks (POSIX close semantics); otherwise another process deletes the WAL
    under it and it stops seeing new commits."""
    done = subprocess.run(
        [sys.executable, "-c", REOPEN_SCRIPT, str(tmp_path / "x.db")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "first first,second\n"
