"""What only the PostgreSQL store has: its schema diagnosis and racing initialisation,
one query text sent as written, ACK exactly once under concurrent connections, LISTEN/NOTIFY waiting
(with a dropped connection), the advisory pane-input lock and a schema of one's own.

The broker, message, notification, timeline and wait/listen suites run on both stores
(``STORES`` in those modules); these tests add what SQLite has no counterpart for. All run
against the real server of ``pg_cluster`` (tests/support/postgres.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from cafleet.broker import fleets, members, messages
from cafleet.errors import Conflict, DatabaseError, LockTimeout
from cafleet.store.engines import open_store
from cafleet.store.schema import add_auxiliary_indexes


@pytest.fixture
def url(pg_cluster) -> str:
    return pg_cluster.fresh_database()


@pytest.fixture
def pg(url):
    store = open_store(url)
    yield store
    store.close()


def _fleet(store, members_count: int = 2):
    record = fleets.create_fleet(
        store,
        name="alpha",
        coding_agent="claude",
        backend="tmux",
        session="$0@/nonexistent/socket",
        window_id="@0",
        pane_id="%0",
    )
    ids = [
        members.register_member(
            store,
            fleet_id=record["fleet_id"],
            name=f"m{i}",
            description="worker",
            backend="tmux",
            session="$0@/nonexistent/socket",
            window_id="@0",
            coding_agent="claude",
            pane_id=None,
        )
        for i in range(members_count)
    ]
    return record["fleet_id"], record["director_member_id"], ids


def _raw(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _snapshot(url: str) -> list:
    """Every relation and row count under every schema but the catalogues: 'nothing written'."""
    with _raw(url) as conn:
        rels = conn.execute(
            "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1, 2"
        ).fetchall()
        counts = [conn.execute(f'SELECT count(*) FROM "{s}"."{r}"').fetchone()[0] for s, r, k in rels if k == "r"]
        return [rels, counts]


# --- diagnosis ----------------------------------------------------------------------------


def test_fresh_schema_reads_back_exactly_the_expected_shape(pg, url):
    from cafleet.store import postgres

    found = postgres.read_shape(pg.conn, "cafleet")
    assert {t: found["column"][t] for t in postgres.EXPECTED_COLUMNS} == {
        t: set(c) for t, c in postgres.EXPECTED_COLUMNS.items()
    }
    assert {t: found["constraint"][t] for t in postgres.EXPECTED_CONSTRAINTS} == {
        t: set(c) for t, c in postgres.EXPECTED_CONSTRAINTS.items()
    }
    for index, definition in postgres.EXPECTED_INDEXES.items():
        assert found["index"][index] == {definition}
    # the initialising transaction creates exactly the seed's tables and indexes
    assert set(found["column"]) == set(postgres.EXPECTED_COLUMNS)
    assert set(found["index"]) == {*postgres.EXPECTED_INDEXES, *(f"{t}_pkey" for t in postgres.EXPECTED_COLUMNS)}
    from cafleet.store import schema

    # every auxiliary table is missing, and the index over messages; an index over an
    # auxiliary table comes with its table and is not reported on its own
    assert postgres.auxiliary_problems(pg) == {
        name: "missing"
        for name in (
            *(i.name for i in schema.DECLARED_AUX_INDEXES if i.table not in schema.AUX_TABLES),
            *schema.AUX_TABLES,
        )
    }
    assert pg.execute("SELECT version, name FROM refinery_schema_history").fetchall() == [(1, "baseline")]
    assert postgres.first_shape_problem(found) is None
    # the baseline's digest is the catalogue's; the fast path sees no auxiliary object yet
    assert postgres.fast_accept(pg.conn, "cafleet", 5.0) == set(postgres.EXPECTED_COLUMNS)

    # the auxiliary objects as `cafleet setup` adds them: the usage tables with the same
    # columns as SQLite's in the same order, and the fast path sees them
    assert add_auxiliary_indexes(pg) == [*schema.AUX_TABLES, *schema.AUX_INDEXES]
    found = postgres.read_shape(pg.conn, "cafleet")
    assert "idx_cafleet_aux_messages_pending" in found["index"]
    assert {t: found["column"][t] for t in postgres.EXPECTED_AUX_COLUMNS} == {
        t: set(c) for t, c in postgres.EXPECTED_AUX_COLUMNS.items()
    }
    assert list(postgres.AUX_TABLES) == list(postgres.EXPECTED_AUX_COLUMNS) == list(schema.AUX_TABLES)
    for table, columns in postgres.EXPECTED_AUX_COLUMNS.items():
        assert [c.split(" ", 1)[0] for c in columns] == [
            line.split()[0]
            for line in schema.AUX_TABLES[table].splitlines()[1:-1]
            if not line.strip().startswith("PRIMARY KEY")  # a table keyed on several columns says so last
        ]
    assert postgres.auxiliary_problems(pg) == {}
    assert postgres.first_shape_problem(found) is None
    assert postgres.fast_accept(pg.conn, "cafleet", 5.0) == {
        *postgres.EXPECTED_COLUMNS,
        *postgres.AUX_TABLES,
        *postgres.AUX_INDEXES,
    }


@pytest.mark.parametrize(
    "damage, words",
    [
        ("CREATE TABLE cafleet.other (x int)", "holds something else (no cafleet ledger"),
        ("INSERT INTO cafleet.refinery_schema_history VALUES (2, 'future', 'x', 'y')", "is newer than this cafleet"),
        ("DROP INDEX cafleet.idx_members_fleet_status", "index idx_members_fleet_status on members"),
        ("ALTER TABLE cafleet.messages ALTER COLUMN text DROP NOT NULL", "column messages.text is altered"),
        ("ALTER TABLE cafleet.messages DROP CONSTRAINT messages_to_member_id_fkey", "FOREIGN KEY (to_member_id)"),
        ("ALTER TABLE cafleet.members ADD COLUMN badge text NOT NULL", "members.badge is NOT NULL without a default"),
        ("DELETE FROM cafleet.refinery_schema_history", "empty or invalid schema ledger"),
    ],
)
def test_a_schema_that_is_not_cafleets_current_one_is_refused_unchanged(url, damage, words, cli, env):
    if damage.startswith("CREATE TABLE"):
        with _raw(url) as conn:
            conn.execute("CREATE SCHEMA cafleet")
            conn.execute(damage)
    else:
        open_store(url).close()
        with _raw(url) as conn:
            conn.execute(damage)
    before = _snapshot(url)
    with pytest.raises(DatabaseError) as refused:
        open_store(url)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    result = cli("fleet", "create", "--name", "x", environ=dict(env, CAFLEET_DATABASE_URL=url))
    assert result.code != 0 and result.err.startswith("Error: ") and result.err.count("\n") == 1
    assert _snapshot(url) == before


def test_a_healthy_schema_is_accepted_in_one_round_trip_and_any_other_is_diagnosed_in_detail(
    url, tmp_path, monkeypatch
):
    """Counted, not timed: every statement the open sends is traced (the hooks' SQL trace).
    A healthy schema costs one message (the settings and the digest query); auxiliary objects,
    present or missing, do not change that; a schema that differs from the baseline, acceptable
    or not, goes on to the detailed diagnosis, and the settings hold on both paths."""
    from tests.support.hooked import FileHooks

    opened = []

    from cafleet.store import postgres

    everything = (*postgres.EXPECTED_COLUMNS, *postgres.AUX_TABLES, *postgres.AUX_INDEXES)

    def open_traced(present=everything) -> list[str]:
        trace = tmp_path / f"sql{len(opened)}"
        try:
            store = open_store(url, busy_timeout=3, hooks=FileHooks(trace_sql=str(trace)))
        finally:
            sent = trace.read_text(encoding="utf-8").splitlines() if trace.exists() else []
            opened.append(sent)
        try:
            assert store.execute("SHOW search_path").fetchone() == ('"cafleet"',)
            assert store.execute("SHOW lock_timeout").fetchone() == ("3s",)
            assert set(present) <= store.present  # the tables it knows exist (no later catalogue look)
            assert store.tables_present(postgres.AUX_TABLES) == set(present) & set(postgres.AUX_TABLES)
        finally:
            store.close()
        return sent

    def is_fast(line: str) -> bool:
        return line.startswith("sql SELECT set_config(") and "md5(string_agg(" in line

    def is_detailed(line: str) -> bool:
        return "SELECT 'relation', c.relname" in line

    first = open_traced(postgres.EXPECTED_COLUMNS)  # empty: the fast query fails, the detailed one initialises
    assert is_fast(first[0]) and any(is_detailed(line) for line in first)
    healthy = open_traced(postgres.EXPECTED_COLUMNS)  # exactly the seed's tables
    assert len(healthy) == 1 and is_fast(healthy[0]), healthy
    store = open_store(url)
    try:
        add_auxiliary_indexes(store)  # as `cafleet setup` does
    finally:
        store.close()
    with_auxiliaries = open_traced()
    assert len(with_auxiliaries) == 1 and is_fast(with_auxiliaries[0]), with_auxiliaries
    with _raw(url) as conn:
        conn.execute("DROP INDEX cafleet.idx_cafleet_aux_messages_pending")
        conn.execute("DROP TABLE cafleet.cafleet_aux_fleet_budgets")
        conn.execute(
            "CREATE TABLE cafleet.cafleet_aux_later (member_id BIGINT NOT NULL REFERENCES cafleet.members(member_id), "
            "tokens BIGINT NOT NULL)"
        )
        conn.execute("CREATE INDEX idx_cafleet_aux_later_member ON cafleet.cafleet_aux_later (member_id)")
    # auxiliary objects, two missing and two more (one referencing members), are not in the digest
    without_budgets = [name for name in (*postgres.EXPECTED_COLUMNS, *postgres.AUX_TABLES) if "budgets" not in name]
    # (the dropped pending index is not in `present`: the store would ask before creating it)
    auxiliary = open_traced(without_budgets)
    assert len(auxiliary) == 1 and is_fast(auxiliary[0]), auxiliary
    with _raw(url) as conn:
        conn.execute("ALTER TABLE cafleet.members ADD COLUMN badge text")
    different = open_traced(without_budgets)  # accepted (an extra nullable column), but only by the detailed check
    assert is_fast(different[0]) and any(is_detailed(line) for line in different[1:]), different
    with _raw(url) as conn:
        conn.execute("ALTER TABLE cafleet.members DROP COLUMN badge")
        conn.execute("DROP INDEX cafleet.idx_members_fleet_status")
    with pytest.raises(DatabaseError, match="index idx_members_fleet_status on members"):
        open_traced(without_budgets)
    assert is_fast(opened[-1][0]) and any(is_detailed(line) for line in opened[-1][1:]), opened[-1]


def test_racing_first_opens_initialise_once(url):
    errors, stores = [], []
    start = threading.Barrier(8)

    def opener():
        try:
            start.wait()
            stores.append(open_store(url))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=opener) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and len(stores) == 8
    assert stores[0].execute("SELECT count(*) FROM refinery_schema_history").fetchone()[0] == 1
    for store in stores:
        store.close()


def test_schema_setting_keeps_two_fleets_apart(url, env, cli):
    a = cli("fleet", "list", "--json", environ=dict(env, CAFLEET_DATABASE_URL=url, CAFLEET_PG_SCHEMA="team_a"))
    assert a.code == 0, a.err
    store_a, store_b = open_store(url, schema="team_a"), open_store(url, schema="team_b")
    try:
        _fleet(store_a)
        assert len(fleets.list_fleets(store_a)) == 1 and fleets.list_fleets(store_b) == []
    finally:
        store_a.close()
        store_b.close()
    bad = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=url, CAFLEET_PG_SCHEMA="Bad-Name"))
    assert bad.code != 0 and bad.err.startswith("Error: CAFLEET_PG_SCHEMA ") and bad.err.count("\n") == 1


def test_unreachable_server_is_one_line(env, cli, tmp_path):
    result = cli(
        "fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=f"postgresql://nobody:secret@/x?host={tmp_path}")
    )
    assert result.code != 0 and result.err.startswith("Error: cannot reach database ")
    assert result.err.count("\n") == 1 and "secret" not in result.err


# --- one query text for both engines ------------------------------------------------------


def test_the_broker_queries_reach_the_server_as_written(pg):
    """No statement text is rewritten between the broker and the server: the queries that
    differ most between the engines (CROSS JOIN order, the null-safe comparison, the unary
    ``+``) run on PostgreSQL in the very text SQLite plans (tests/test_query_plans.py)."""
    from cafleet.broker import notifications, records, timeline, traffic

    fleet, director, (m1, m2) = _fleet(pg)
    sent = messages.send(pg, director, m1, "hello ? 100%")["message_id"]
    seen: list[str] = []
    pg.conn.trace = seen.append
    try:
        assert [m["message_id"] for m in timeline.fleet_timeline(pg, fleet, before_id=sent + 1)] == [sent]
        assert traffic.totals(pg, fleet, sent) == {(director, m1): 1}
        assert [row[1:] for row in traffic.sent_since(pg, fleet, sent, "0")] == [(director, m1)]
        assert notifications.stale_notifications(pg, fleet, "9") == []
        assert {p["member_id"] for p in fleets.fleet_placements(pg, fleet)} == {m1, m2}
    finally:
        pg.conn.trace = None
    assert len(seen) == 5
    for text in seen:
        assert "CROSS JOIN messages msg WHERE" in text or records.NOT_ROOT_DIRECTOR in text, text
    assert sum("+msg.message_id" in text for text in seen) == 3
    assert pg.execute("SELECT text FROM messages").fetchone() == ("hello ? 100%",)


def test_a_nul_in_a_body_is_refused_before_anything_is_written(pg):
    _, director, (m1, _) = _fleet(pg)
    with pytest.raises(DatabaseError, match="U\\+0000"):
        messages.send(pg, director, m1, "a\x00b")
    assert pg.execute("SELECT count(*) FROM messages").fetchone()[0] == 0


# --- writes under concurrency ------------------------------------------------------------


def test_ack_exactly_once_under_racing_connections(pg, url):
    _, director, (m1, _) = _fleet(pg)
    message_id = messages.send(pg, director, m1, "once")["message_id"]
    stores = [open_store(url) for _ in range(8)]
    outcomes: list[str] = []
    start = threading.Barrier(len(stores))

    def acker(store):
        start.wait()
        try:
            messages.ack(store, message_id)
            outcomes.append("ok")
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=acker, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for store in stores:
        store.close()
    assert sorted(outcomes) == ["conflict"] * 7 + ["ok"]
    assert pg.execute("SELECT status_state FROM messages WHERE message_id = ?", (message_id,)).fetchone() == (
        "completed",
    )


def test_fan_out_reports_every_committed_id_while_another_writer_races(pg, url):
    _, director, ids = _fleet(pg, members_count=6)
    other = open_store(url)
    stop = threading.Event()

    def noise():
        while not stop.is_set():
            messages.send(other, ids[0], ids[1], "noise")

    thread = threading.Thread(target=noise)
    thread.start()
    try:
        result = messages.broadcast(pg, director, "all hands")
    finally:
        stop.set()
        thread.join(timeout=60)
        other.close()
    reported = sorted(r["message_id"] for r in result["sent"])
    stored = [
        row[0]
        for row in pg.execute("SELECT message_id FROM messages WHERE text = 'all hands' ORDER BY message_id").fetchall()
    ]
    assert result["failed"] == [] and reported == stored and len(stored) == 6


def test_fleet_bootstrap_is_atomic(pg):
    with pytest.raises(Exception):  # noqa: B017 - the member insert fails on a NULL name
        fleets.create_fleet(
            pg, name="alpha", coding_agent=None, backend="tmux", session="s", window_id="@0", pane_id="%0"
        )
    assert pg.execute("SELECT count(*) FROM fleets").fetchone()[0] == 0
    assert pg.execute("SELECT count(*) FROM members").fetchone()[0] == 0
    assert _fleet(pg)[0] > 0  # the connection is usable afterwards


# --- waiting ------------------------------------------------------------------------------


def test_waiter_wakes_on_a_commit_and_survives_a_dropped_connection(pg, url):
    waiter = pg.change_waiter(0.05)
    try:
        assert waiter.wait(time.monotonic() + 0.2) is False
        first = waiter.conn
        with _raw(url) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
            ).fetchall()
        assert killed == [(True,)]
        # The dropped connection is noticed, re-established and answered with "read again".
        assert waiter.wait(time.monotonic() + 30) is True
        assert waiter.conn is not None and waiter.conn is not first
        writer = open_store(url)
        try:
            timer = threading.Timer(0.2, lambda: _fleet(writer))
            timer.start()
            assert waiter.wait(time.monotonic() + 30) is True  # woken by the NOTIFY after re-LISTEN
            timer.join()
        finally:
            writer.close()
    finally:
        waiter.close()


# --- the pane-input lock ------------------------------------------------------------------


def test_advisory_pane_lock_is_exclusive_bounded_and_freed_when_the_holder_dies(url):
    from cafleet.delivery.keystrokes.lock import pane_lock
    from cafleet.store.engines import lock_space
    from cafleet.store.postgres import pane_key

    assert pane_key("tmux", "$0@/s", "%1") != pane_key("tmux", "$0@/s", "%2")
    assert -(2**63) <= pane_key("tmux", "$0@/s", "%1") < 2**63
    with pane_lock(lock_space(url), "tmux", "$0@/s", "%1", timeout=1):
        with pytest.raises(LockTimeout), pane_lock(lock_space(url), "tmux", "$0@/s", "%1", timeout=0.2):
            pass
        with pane_lock(lock_space(url), "tmux", "$0@/s", "%2", timeout=0):
            pass  # another pane is another key
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom cafleet.delivery.keystrokes.lock import pane_lock\nfrom cafleet.store.engines import lock_space\n"
            f"with pane_lock(lock_space({url!r}), 'tmux', '$0@/s', '%1', 5):\n    print('held', flush=True)\n    time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout), pane_lock(lock_space(url), "tmux", "$0@/s", "%1", timeout=0.2):
            pass
        holder.kill()
        holder.wait(timeout=30)
        with pane_lock(lock_space(url), "tmux", "$0@/s", "%1", timeout=30):
            pass  # the server ended the dead holder's session, and with it the lock
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_writer_that_waits_too_long_gets_the_locked_line_and_a_usable_connection(pg, url):
    from cafleet.store.postgres import lock_key

    _, director, (m1, _) = _fleet(pg)
    impatient = open_store(url, busy_timeout=0.2)
    with _raw(url) as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("writers", "cafleet"),))
        with pytest.raises(DatabaseError, match=r"is locked by another process \(waited 0.2 s\); try again\."):
            messages.send(impatient, director, m1, "blocked")
        holder.execute("ROLLBACK")
    assert messages.send(impatient, director, m1, "now")["text"] == "now"  # the same connection, usable again
    impatient.close()


def test_setup_and_doctor_work_on_postgresql_and_never_print_the_password(url, env, cli):
    secret_url = url.replace("postgres@", "postgres:hunter2@")
    environ = dict(env, CAFLEET_DATABASE_URL=secret_url)
    setup = cli("setup", "--json", environ=environ)
    assert setup.code == 0, setup.err
    assert "hunter2" not in setup.out + setup.err and "***" in setup.json()["database"]["path"]
    again = cli("setup", "--json", environ=environ)  # the asset_installs upsert, a second time
    assert again.code == 0, again.err
    doctor = cli("doctor", "--json", environ=environ)
    assert "hunter2" not in doctor.out + doctor.err
    database = doctor.json()["database"]
    assert database["ok"] is True and database["auxiliary_indexes"] == {} and database["auxiliary_tables"] == {}
    store = open_store(url)
    try:
        assert store.execute("SELECT count(*) FROM asset_installs").fetchone()[0] == len(setup.json()["assets"])
    finally:
        store.close()


# --- whose schema it is -----------------------------------------------------------------------


@pytest.fixture
def roles(pg_cluster, url):
    """``role()`` -> (name, the test database's URL as that role): a new login role of the
    session's cluster, with its objects and privileges dropped with it at teardown."""
    import uuid
    from urllib.parse import quote

    made: list[str] = []

    def make(suffix: str = "") -> tuple[str, str]:
        name = "r_" + uuid.uuid4().hex[:12] + suffix
        pg_cluster.admin(f"CREATE ROLE {_quoted(name)} LOGIN")
        made.append(name)
        return name, url.replace("postgresql://postgres@", f"postgresql://{quote(name, safe='')}@", 1)

    yield make
    if made:
        with _raw(url) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)", (made,))
            conn.execute(f"DROP OWNED BY {', '.join(map(_quoted, made))} CASCADE")
        for name in made:
            pg_cluster.admin(f"DROP ROLE {_quoted(name)}")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _grant_all(conn, schema: str, role: str) -> None:
    """What an owner grants a role that is to use its schema."""
    conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {_quoted(role)}")
    conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {_quoted(role)}")
    conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {_quoted(role)}")


def _dbname(url: str) -> str:
    return url.split("@/", 1)[1].split("?", 1)[0]


def _planted(url: str, owner: str, victim: str) -> None:
    """What a role that got to the schema first leaves behind: cafleet's own tables, opened
    by ``owner``, a SECURITY DEFINER trigger copying every message's text into a table of
    its own, and the privileges that make it all look usable to ``victim``."""
    open_store(url).close()
    with _raw(url) as conn:
        conn.execute("CREATE TABLE cafleet.loot (text text)")
        conn.execute(
            "CREATE FUNCTION cafleet.copy_text() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER "
            "SET search_path = cafleet AS $$ BEGIN INSERT INTO loot VALUES (NEW.text); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER copy_text AFTER INSERT ON cafleet.messages FOR EACH ROW EXECUTE FUNCTION cafleet.copy_text()"
        )
        _grant_all(conn, "cafleet", victim)


def test_a_schema_another_role_owns_is_refused_unless_that_owner_is_trusted(url, roles, env, cli):
    """A role that created the schema first owns every table in it, so it reads every
    message whatever the victim's privileges; here it also planted a SECURITY DEFINER
    trigger that copies each body into its own table. The victim's cafleet refuses the
    schema with one line and writes nothing, until CAFLEET_PG_TRUSTED_OWNER names that
    owner; doctor then lists the trigger."""
    owner, owner_url = roles()
    victim, victim_url = roles()
    with _raw(url) as conn:
        conn.execute(f"GRANT CREATE ON DATABASE {_dbname(url)} TO {owner}")
    _planted(owner_url, owner, victim)
    environ = dict(env, CAFLEET_DATABASE_URL=victim_url)
    before = _snapshot(url)
    with pytest.raises(DatabaseError, match=f"is owned by role {owner}, not by {victim} that connects"):
        open_store(victim_url)
    for command in (("fleet", "list"), ("message", "poll", "1")):
        refused = cli(*command, environ=environ)
        assert refused.code == 1 and refused.err.count("\n") == 1, refused
        assert refused.err.startswith(f"Error: schema cafleet of database postgresql://{victim}@/"), refused.err
        assert f"is owned by role {owner}, not by {victim} that connects" in refused.err
        assert f"CAFLEET_PG_TRUSTED_OWNER={owner}" in refused.err
    assert _snapshot(url) == before
    doctor = cli("doctor", "--json", environ=environ)
    database = doctor.json()["database"]
    assert doctor.code == 1 and database["ok"] is False and f"owned by role {owner}" in database["error"]
    assert f"CAFLEET_PG_TRUSTED_OWNER={owner}" in database["fix"]
    # the schema of one's own, with one table handed to another role: refused the same way
    with _raw(url) as conn:
        conn.execute(f"GRANT CREATE ON DATABASE {_dbname(url)} TO {victim}")
    own = dict(environ, CAFLEET_PG_SCHEMA="own")
    assert cli("fleet", "list", environ=own).code == 0
    with _raw(url) as conn:
        conn.execute(f"ALTER TABLE own.messages OWNER TO {owner}")
    table = cli("fleet", "list", environ=own)
    assert table.code == 1 and table.err.count("\n") == 1
    assert f"table messages in schema own of database postgresql://{victim}@/" in table.err
    assert f"is owned by role {owner}, not by {victim} that connects" in table.err
    # trusted: accepted, and doctor names the trigger the owner planted on a required table
    trusted = dict(environ, CAFLEET_PG_TRUSTED_OWNER=owner)
    assert cli("fleet", "list", environ=trusted).code == 0
    doctor = cli("doctor", "--json", environ=trusted).json()["database"]
    assert doctor["ok"] is True
    assert doctor["triggers"] == [
        {
            "kind": "trigger",
            "name": "copy_text",
            "table": "messages",
            "function": "cafleet.copy_text()",
            "function_owner": owner,
            "security_definer": True,
            "foreign": False,
        }
    ]
    text = cli("doctor", environ=trusted).out
    assert f"! trigger copy_text on messages runs cafleet.copy_text() of role {owner} (SECURITY DEFINER)" in text


def test_doctor_reports_the_triggers_and_rules_on_required_tables(url, roles, env, cli):
    """cafleet creates no trigger or rule on a required table. doctor lists each one found
    (✓ with a note), and fails for a trigger whose function belongs to a role that is
    neither the one connecting nor the trusted owner: a role granted TRIGGER on the table
    can make every insert run its code."""
    other, other_url = roles()
    environ = dict(env, CAFLEET_DATABASE_URL=url)
    assert cli("fleet", "list", environ=environ).code == 0
    clean = cli("doctor", "--json", environ=environ).json()["database"]
    assert clean["ok"] is True and clean["triggers"] == []  # the foreign keys' internal triggers are not listed
    with _raw(url) as conn:
        conn.execute(
            "CREATE TRIGGER same BEFORE UPDATE ON cafleet.fleets FOR EACH ROW "
            "EXECUTE FUNCTION suppress_redundant_updates_trigger()"
        )
        conn.execute("CREATE RULE tell AS ON UPDATE TO cafleet.members DO ALSO NOTIFY somewhere")
    noted = cli("doctor", "--json", environ=environ).json()["database"]
    assert noted["ok"] is True
    assert [(t["kind"], t["name"], t["table"], t["foreign"]) for t in noted["triggers"]] == [
        ("trigger", "same", "fleets", False),
        ("rule", "tell", "members", False),
    ]
    with _raw(url) as conn:
        conn.execute(f"GRANT CREATE ON DATABASE {_dbname(url)} TO {other}")
        conn.execute(f"GRANT USAGE ON SCHEMA cafleet TO {other}")
        conn.execute(f"GRANT TRIGGER ON cafleet.messages TO {other}")
    with _raw(other_url) as conn:
        conn.execute("CREATE SCHEMA mine")
        conn.execute("CREATE FUNCTION mine.look() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER look BEFORE INSERT ON cafleet.messages FOR EACH ROW EXECUTE FUNCTION mine.look()")
    doctor = cli("doctor", "--json", environ=environ)
    database = doctor.json()["database"]
    assert doctor.code == 1 and database["ok"] is False
    assert {
        "kind": "trigger",
        "name": "look",
        "table": "messages",
        "function": "mine.look()",
        "function_owner": other,
        "security_definer": False,
        "foreign": True,
    } in database["triggers"]
    assert f"trigger look on messages runs mine.look() of role {other}" in database["error"]
    assert database["fix"].startswith("DROP TRIGGER look ON cafleet.messages")
    text = cli("doctor", environ=environ).out
    assert f"✗ database: trigger look on messages runs mine.look() of role {other}" in text
    assert "! rule tell on members" in text
    assert cli("fleet", "list", environ=environ).code == 0  # compatible: the store still opens


def test_a_trusted_owners_schema_is_accepted_in_one_round_trip(url, roles, env, cli, tmp_path, monkeypatch):
    """The ownership check rides in the fast path's one message: a healthy schema owned by
    the trusted owner (a name with a quote and a backslash, so its SQL constant is escaped)
    costs one statement, as one's own does; another owner is refused by the detailed check."""
    from tests.support.hooked import FileHooks

    owner, owner_url = roles("'\\o")
    user, user_url = roles()
    with _raw(url) as conn:
        conn.execute(f"GRANT CREATE ON DATABASE {_dbname(url)} TO {_quoted(owner)}")
    open_store(owner_url).close()
    with _raw(owner_url) as conn:
        _grant_all(conn, "cafleet", user)

    def traced(**kwargs) -> list[str]:
        trace = tmp_path / f"sql{len(list(tmp_path.glob('sql*')))}"
        store = open_store(user_url, **kwargs, hooks=FileHooks(trace_sql=str(trace)))
        store.close()
        return trace.read_text(encoding="utf-8").splitlines()

    sent = traced(trusted_owner=owner)
    assert len(sent) == 1 and "md5(string_agg(" in sent[0] and "pg_get_userbyid(relowner)" in sent[0], sent
    store = open_store(user_url, trusted_owner=owner)
    try:
        fleet_id, director, (m1, _) = _fleet(store)
        assert messages.send(store, director, m1, "for the trusted owner's schema")["message_id"] > 0
    finally:
        store.close()
    with pytest.raises(DatabaseError, match="is owned by role"):
        open_store(user_url, trusted_owner="someone_else", hooks=FileHooks(trace_sql=str(tmp_path / "refused")))
    refused = (tmp_path / "refused").read_text(encoding="utf-8").splitlines()
    assert "md5(string_agg(" in refused[0] and any("SELECT 'relation', c.relname" in line for line in refused[1:])
    assert not any(line.startswith("sql CREATE") or line.startswith("sql INSERT") for line in refused)
    environ = dict(env, CAFLEET_DATABASE_URL=user_url)
    listed = cli("fleet", "list", "--json", environ=dict(environ, CAFLEET_PG_TRUSTED_OWNER=owner))
    assert listed.code == 0 and [f["fleet_id"] for f in listed.json()] == [fleet_id]
    for bad in ("a\nb", "x" * 64):
        result = cli("fleet", "list", environ=dict(environ, CAFLEET_PG_TRUSTED_OWNER=bad))
        assert result.code == 2 and result.err.startswith("Error: CAFLEET_PG_TRUSTED_OWNER must be a PostgreSQL role")
        assert result.err.count("\n") == 1
