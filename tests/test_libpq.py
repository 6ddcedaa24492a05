"""cafleet's binding of libpq (cafleet.store.libpq) against a real server: values sent apart
from the SQL text and coming back typed, several statements in one round trip, errors by
SQLSTATE, notifications, what libpq reads of the environment, and what the binding refuses
(an encoding other than UTF8, a replication connection)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cafleet.store import libpq
from cafleet.store.libpq import binding


@pytest.fixture
def url(pg_cluster) -> str:
    return pg_cluster.fresh_database()


def test_values_go_apart_from_the_text_and_come_back_typed(url):
    awkward = "it's a \\back'slash\\' — ünïcode; %s %(x)s ? '' $$ $1"
    with libpq.connect(url) as conn:
        row = conn.execute(
            "SELECT ?::text, ?::bigint, ?::bigint, ?, ?::float8, NULL, 1.5::numeric, '\\x00ff'::bytea, ?::text[], ?",
            (awkward, 2**62, -5, True, 0.25, ["a", 'b"c\\'], b"\x00\x01"),
        ).fetchone()
        assert row[:7] == (awkward, 2**62, -5, True, 0.25, None, __import__("decimal").Decimal("1.5"))
        assert row[7] == b"\x00\xff" and row[8] == '{a,"b\\"c\\\\"}' and row[9] == b"\x00\x01"
        assert conn.execute("SELECT ? || ?, '100%', 7 % 4", ("x", "x")).fetchone() == ("xx", "100%", 3)
        assert conn.execute("SELECT '50%?'").fetchone() == ("50%?",)  # a ? inside a literal is text
        assert conn.execute("SELECT ?, ?", (7, 2**40)).fetchone() == (7, 2**40)  # typed as their literals were
        assert conn.execute("SELECT x = ANY(?) FROM (SELECT 3 AS x) s", ([1, 3],)).fetchone() == (True,)
        with pytest.raises(libpq.DataError, match="NUL"):
            conn.execute("SELECT ?", ("a\0b",))


def test_a_question_mark_is_a_placeholder_only_outside_literals_identifiers_and_comments(url):
    query = (
        "SELECT ? AS \"what?\", 'a?''b?' AS s, E'c\\'?' AS e, $$d?$$ AS d, $t$ $$e? $t$ AS t -- f?\n"
        ", /* g? /* nested? */ h? */ a$t$ AS n, ? AS last"
    )
    assert libpq.numbered(query) == (
        query.replace("SELECT ?", "SELECT $1", 1).replace("? AS last", "$2 AS last").encode(),
        2,
    )
    with libpq.connect(url) as conn:
        row = conn.execute("SELECT ? AS \"what?\", 'a?''b?', E'c\\'?', $$d?$$, $t$ $$e? $t$ /* ? */, ?", ("x", 2))
        assert row.fetchone() == ("x", "a?'b?", "c'?", "d?", " $$e? ", 2)
        with pytest.raises(libpq.ProgrammingError, match="more placeholders than parameters"):
            conn.execute("SELECT ?, '?'", ())
        with pytest.raises(libpq.ProgrammingError, match="fewer placeholders than parameters"):
            conn.execute("SELECT '?'", (1,))
        with pytest.raises(libpq.ProgrammingError, match="string literal is not closed"):
            conn.execute("SELECT ?, 'open", (1,))
        assert conn.execute("SELECT 1").fetchone() == (1,)  # nothing was sent: the connection is as it was


def test_a_pipeline_runs_in_one_round_trip_and_stops_at_the_first_failure(url):
    with libpq.connect(url) as conn:
        sent: list[str] = []
        conn.trace = sent.append
        cursor = conn.pipeline(
            [
                ("CREATE TABLE t (x int)", ()),
                ("INSERT INTO t VALUES (?), (?)", (1, 2)),
                ("SELECT x FROM t ORDER BY x", ()),
            ]
        )
        assert cursor.fetchall() == [(1,), (2,)] and len(sent) == 1
        assert conn.execute("UPDATE t SET x = x + 1").rowcount == 2
        with pytest.raises(libpq.DataError):
            conn.pipeline([("INSERT INTO t VALUES (10)", ()), ("SELECT 1 / 0", ()), ("INSERT INTO t VALUES (11)", ())])
        # One sync, one implicit transaction: the first insert was rolled back, the last never ran.
        assert conn.execute("SELECT count(*) FROM t WHERE x >= 10").fetchone() == (0,)
        assert conn.info.transaction_status == libpq.IDLE


def test_errors_are_classed_by_sqlstate_and_the_connection_stays_usable(url):
    with libpq.connect(url) as conn:
        with pytest.raises(libpq.ProgrammingError) as raised:
            conn.execute("SELECT * FROM no_such_table")
        assert raised.value.sqlstate == "42P01" and 'relation "no_such_table" does not exist' in str(raised.value)
        conn.execute("CREATE TABLE u (x int PRIMARY KEY)")
        conn.execute("INSERT INTO u VALUES (1)")
        with pytest.raises(libpq.IntegrityError):
            conn.execute("INSERT INTO u VALUES (1)")
        conn.execute("BEGIN")
        with pytest.raises(libpq.DataError):
            conn.execute("SELECT 1 / 0")
        assert conn.info.transaction_status == libpq.INERROR
        conn.execute("ROLLBACK")
        assert conn.info.transaction_status == libpq.IDLE and conn.execute("SELECT 1").fetchone() == (1,)


def test_a_session_the_server_ends_is_broken_not_a_hang(url):
    with libpq.connect(url) as conn, libpq.connect(url) as admin:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        admin.execute("SELECT pg_terminate_backend(?)", (pid,))
        with pytest.raises(libpq.OperationalError):
            conn.execute("SELECT 1")
        assert conn.broken and conn.closed


def test_notifications_arrive_while_waiting_and_between_queries(url):
    with libpq.connect(url) as listener, libpq.connect(url) as sender:
        listener.execute('LISTEN "ch"')
        assert listener.notifies(timeout=0.01) == []
        sender.execute("NOTIFY ch, 'one'")
        got = listener.notifies(timeout=10, stop_after=1)
        assert [(n.channel, n.payload) for n in got] == [("ch", "one")]
        sender.execute("NOTIFY ch, 'two'")
        listener.execute("SELECT pg_sleep(0.2)")  # arrives with a query's answer: kept for later
        assert [n.payload for n in listener.notifies(timeout=10, stop_after=1)] == ["two"]


def test_the_environment_and_the_passfile_fill_in_what_the_url_leaves_out(pg_cluster, tmp_path, monkeypatch):
    """PGHOST and PGDATABASE name the server; a password comes from the passfile, and a
    passfile that others can read is ignored, as libpq does (it is libpq reading them)."""
    url = pg_cluster.password_database("s3:cr\\et")
    role, database = url.split("://", 1)[1].split("@", 1)[0], url.split("@/", 1)[1].split("?", 1)[0]
    monkeypatch.setenv("PGHOST", pg_cluster.socket_dir)
    monkeypatch.setenv("PGDATABASE", database)
    passfile = tmp_path / "pgpass"
    passfile.write_text("# a comment\nlocalhost:*:*:*:wrong\n*:*:*:" + role + ":s3\\:cr\\\\et\n")
    os.chmod(passfile, 0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    with libpq.connect(f"postgresql://{role}@") as conn:  # SCRAM, with the passfile's password
        assert conn.execute("SELECT current_user, current_database()").fetchone() == (role, database)
        assert conn.info.dbname == database and conn.info.host == pg_cluster.socket_dir
    os.chmod(passfile, 0o644)
    with pytest.raises(libpq.OperationalError, match="password"):
        libpq.connect(f"postgresql://{role}@")
    with pytest.raises(libpq.OperationalError, match="password authentication failed"):
        libpq.connect(f"postgresql://{role}:nope@")


def test_urls_are_read_by_libpq_itself():
    options = libpq.parse("postgresql://al%40ice:p%3Aw@[::1]:6543/d%2Fb?sslmode=require&pass%77ord=x2")
    assert {k: options[k] for k in ("user", "host", "port", "dbname", "sslmode", "password")} == {
        "user": "al@ice",
        "host": "::1",
        "port": "6543",
        "dbname": "d/b",
        "sslmode": "require",
        "password": "x2",  # the percent-encoded key is a password to libpq
    }
    assert libpq.parse("postgresql://h1,h2:5433/x")["host"] == "h1,h2"
    for bad, words in (
        ("postgresql://a:s3%ZZ@h/x", "invalid percent-encoded token"),
        ("postgresql://h/x?foo=1", 'invalid URI query parameter: "foo"'),
    ):
        with pytest.raises(libpq.ProgrammingError, match=words):
            libpq.parse(bad)


def test_a_client_encoding_switched_by_the_session_ends_the_connection_before_anything_else_runs(url):
    """Before: the old client rendered values into the text and ignored a ParameterStatus
    change, so after ``SET client_encoding SJIS`` with ``backslash_quote=on`` a value ending
    in a backslash escaped its quote and ran a second statement. Values now go apart from
    the text, and a connection whose client encoding is no longer UTF8 is closed."""
    with libpq.connect(url) as conn:
        conn.execute("CREATE TABLE v (t text)")
        conn.execute("INSERT INTO v VALUES (?)", ("ā\\'; SELECT 42 AS pwned; --",))
        with pytest.raises(libpq.NotSupportedError, match="client_encoding is SJIS"):
            conn.execute("SET client_encoding = 'SJIS'")
        assert conn.closed
    with libpq.connect(url) as conn:
        assert conn.execute("SELECT t FROM v").fetchall() == [("ā\\'; SELECT 42 AS pwned; --",)]
    with pytest.raises(libpq.NotSupportedError, match="client_encoding is LATIN1"):
        libpq.connect(url + "&client_encoding=LATIN1")


def test_a_database_in_another_encoding_and_a_replication_connection_are_refused(pg_cluster, url):
    pg_cluster.admin("CREATE DATABASE ascii_db TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'")
    try:
        with pytest.raises(libpq.NotSupportedError, match="server_encoding is SQL_ASCII"):
            libpq.connect(pg_cluster.url("ascii_db"))
    finally:
        pg_cluster.admin("DROP DATABASE ascii_db")
    with pytest.raises(libpq.NotSupportedError, match="replication"):
        libpq.connect(url + "&replication=database")


_TEXT = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=60) | st.sampled_from(
    ["'", "\\", "\\'", "''", "$$", "$1", "?", "ā\\", "\\x00", "E'\\''", "--", "/*"]
)


@pytest.fixture(scope="module")
def shared_conn(pg_cluster):
    with libpq.connect(pg_cluster.fresh_database()) as conn:
        conn.execute("CREATE TABLE r (t text)")
        yield conn


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_TEXT, conforming=st.booleans(), quote=st.sampled_from(["on", "off", "safe_encoding"]))
def test_any_text_round_trips_as_data_whatever_the_session_settings(shared_conn, value, conforming, quote):
    conn = shared_conn
    conn.pipeline(
        [
            (f"SET standard_conforming_strings = {'on' if conforming else 'off'}", ()),
            (f"SET backslash_quote = {quote}", ()),
            ("DELETE FROM r", ()),
        ]
    )
    conn.execute("INSERT INTO r VALUES (?)", (value,))
    assert conn.execute("SELECT t, count(*) OVER () FROM r WHERE t = ?", (value,)).fetchall() == [(value, 1)]


def test_without_libpq_a_postgres_url_says_what_to_install_and_sqlite_needs_nothing(cli, env, monkeypatch, tmp_path):
    """A machine without libpq.so.5 (a stand-in: ctypes refusing to load it, as dlopen does
    when the file is absent): one line naming the package; a SQLite file works as before."""
    import ctypes

    real = ctypes.CDLL

    def absent(name, *args, **kwargs):
        if "libpq" in str(name):
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(ctypes, "CDLL", absent)
    monkeypatch.setattr(binding, "_LIBRARY", [])
    result = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL="postgresql://nobody@/nowhere"))
    assert (result.code, result.out) == (1, "")
    assert result.err == f"Error: {libpq.MISSING}\n"
    sqlite = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=str(tmp_path / "f.db")))
    assert sqlite.code == 0, sqlite
