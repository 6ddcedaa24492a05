"""cafleet's own PostgreSQL client (cafleet.store.pgwire) against a real server: what the
store relies on of libpq's behaviour (the URL, the PG* variables, the passfile), values
going out as literals and coming back typed, several statements in one round trip,
notifications, and errors by SQLSTATE."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from cafleet.store import pgwire


@pytest.fixture
def url(pg_cluster) -> str:
    return pg_cluster.fresh_database()


def test_values_go_out_as_literals_and_come_back_typed(url):
    awkward = "it's a \\back'slash\\' — ünïcode; %s %(x)s ? ''"
    with pgwire.connect(url) as conn:
        row = conn.execute(
            "SELECT ?::text, ?::bigint, ?::bigint, ?, ?::float8, NULL, 1.5::numeric, '\\x00ff'::bytea, ?::text[]",
            (awkward, 2**62, -5, True, 0.25, ["a", "b'c"]),
        ).fetchone()
        assert row[:7] == (awkward, 2**62, -5, True, 0.25, None, __import__("decimal").Decimal("1.5"))
        assert row[7] == b"\x00\xff" and row[8] == "{a,b'c}"  # an array comes back as its text
        assert conn.execute("SELECT ? || ?, '100%', 7 % 4", ("x", "x")).fetchone() == ("xx", "100%", 3)
        assert conn.execute("SELECT '50%?'").fetchone() == ("50%?",)  # no parameters: sent as written
        with pytest.raises(pgwire.DataError, match="NUL"):
            conn.execute("SELECT ?", ("a\0b",))


def test_a_question_mark_is_a_placeholder_only_outside_literals_identifiers_and_comments(url):
    query = (
        "SELECT ? AS \"what?\", 'a?''b?' AS s, E'c\\'?' AS e, $$d?$$ AS d, $t$ $$e? $t$ AS t -- f?\n"
        ", /* g? /* nested? */ h? */ a$t$ AS n, ? AS last"
    )
    rendered = pgwire.render(query, ("x", 2))
    assert rendered == query.replace("SELECT ?", "SELECT 'x'", 1).replace("? AS last", "2 AS last", 1)
    with pgwire.connect(url) as conn:
        row = conn.execute("SELECT ? AS \"what?\", 'a?''b?', E'c\\'?', $$d?$$, $t$ $$e? $t$ /* ? */, ?", ("x", 2))
        assert row.fetchone() == ("x", "a?'b?", "c'?", "d?", " $$e? ", 2)
        with pytest.raises(pgwire.ProgrammingError, match="more placeholders than parameters"):
            conn.execute("SELECT ?, '?'", ())
        with pytest.raises(pgwire.ProgrammingError, match="fewer placeholders than parameters"):
            conn.execute("SELECT '?'", (1,))
        with pytest.raises(pgwire.ProgrammingError, match="string literal is not closed"):
            conn.execute("SELECT ?, 'open", (1,))


def test_several_statements_come_back_in_one_round_trip_as_result_sets(url):
    with pgwire.connect(url) as conn:
        cursor = conn.execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2); SELECT x FROM t ORDER BY x")
        assert cursor.rowcount == -1 and cursor.nextset() and cursor.rowcount == 2
        assert cursor.nextset() and cursor.fetchall() == [(1,), (2,)] and cursor.nextset() is None
        assert conn.execute("UPDATE t SET x = x + 1").rowcount == 2


def test_errors_are_classed_by_sqlstate_and_the_connection_stays_usable(url):
    with pgwire.connect(url) as conn:
        with pytest.raises(pgwire.ProgrammingError) as raised:
            conn.execute("SELECT * FROM no_such_table")
        assert raised.value.sqlstate == "42P01" and 'relation "no_such_table" does not exist' in str(raised.value)
        conn.execute("CREATE TABLE u (x int PRIMARY KEY)")
        conn.execute("INSERT INTO u VALUES (1)")
        with pytest.raises(pgwire.IntegrityError):
            conn.execute("INSERT INTO u VALUES (1)")
        conn.execute("BEGIN")
        with pytest.raises(pgwire.DataError):
            conn.execute("SELECT 1 / 0")
        assert conn.info.transaction_status == pgwire.INERROR
        conn.execute("ROLLBACK")
        assert conn.info.transaction_status == pgwire.IDLE and conn.execute("SELECT 1").fetchone() == (1,)


def test_a_session_the_server_ends_is_broken_not_a_hang(url):
    with pgwire.connect(url) as conn, pgwire.connect(url) as admin:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        admin.execute("SELECT pg_terminate_backend(?)", (pid,))
        with pytest.raises(pgwire.OperationalError):
            conn.execute("SELECT 1")
        assert conn.broken and conn.closed


def test_notifications_arrive_while_waiting_and_between_queries(url):
    with pgwire.connect(url) as listener, pgwire.connect(url) as sender:
        listener.execute('LISTEN "ch"')
        assert list(listener.notifies(timeout=0.01)) == []
        sender.execute("NOTIFY ch, 'one'")
        got = list(listener.notifies(timeout=10, stop_after=1))
        assert [(n.channel, n.payload) for n in got] == [("ch", "one")]
        sender.execute("NOTIFY ch, 'two'")
        listener.execute("SELECT pg_sleep(0.2)")  # arrives with a query's answer: kept for later
        assert [n.payload for n in listener.notifies(timeout=10, stop_after=1)] == ["two"]


def test_the_environment_and_the_passfile_fill_in_what_the_url_leaves_out(pg_cluster, tmp_path, monkeypatch):
    """PGHOST and PGDATABASE name the server; a password comes from the passfile only when
    the server asks, and a passfile that others can read is ignored, as libpq does."""
    url = pg_cluster.password_database("s3:cr\\et")
    role, database = url.split("://", 1)[1].split("@", 1)[0], url.split("@/", 1)[1].split("?", 1)[0]
    monkeypatch.setenv("PGHOST", pg_cluster.socket_dir)
    monkeypatch.setenv("PGDATABASE", database)
    passfile = tmp_path / "pgpass"
    passfile.write_text("# a comment\nlocalhost:*:*:*:wrong\n*:*:*:" + role + ":s3\\:cr\\\\et\n")
    os.chmod(passfile, 0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    with pgwire.connect(f"postgresql://{role}@") as conn:  # SCRAM, with the passfile's password
        assert conn.execute("SELECT current_user, current_database()").fetchone() == (role, database)
        assert conn.info.dbname == database and conn.info.host == pg_cluster.socket_dir
    os.chmod(passfile, 0o644)
    with pytest.raises(pgwire.OperationalError, match="no password supplied"):
        pgwire.connect(f"postgresql://{role}@")
    with pytest.raises(pgwire.OperationalError, match="password authentication failed"):
        pgwire.connect(f"postgresql://{role}:nope@")


def test_urls_are_read_as_libpq_reads_them():
    params = pgwire.parse_url("postgresql://al%40ice:p%3Aw@[::1]:6543/d%2Fb?sslmode=require&application_name=x")
    assert params == {
        "user": "al@ice",
        "password": "p:w",
        "host": "::1",
        "port": "6543",
        "dbname": "d/b",
        "sslmode": "require",
        "application_name": "x",
    }
    assert pgwire.parse_url("postgres:///db?host=%2Ftmp%2Fs") == {"dbname": "db", "host": "/tmp/s"}
    for bad, words in (
        ("postgresql://a:s3%ZZ@h/x", 'invalid percent-encoded token: "s3%ZZ"'),
        ("postgresql://h/x?foo=1", 'invalid URI query parameter: "foo"'),
        ("postgresql://h1,h2/x", "several hosts"),
    ):
        with pytest.raises(pgwire.Error, match=words):
            pgwire.parse_url(bad)


def test_tls_over_tcp_with_each_sslmode_and_ssl_loaded_only_then(tmp_path):
    """A private cluster listening on 127.0.0.1 with TLS (a self-signed certificate made
    for the test) and a SCRAM login: ``require`` and ``verify-ca`` encrypt, ``verify-full``
    refuses a certificate that does not name the host, and a whole command runs over TLS;
    ``ssl`` is imported for that connection and not before."""
    from tests.support.postgres import Cluster, missing_reason
    from tests.support.sshd import free_port

    if missing_reason() or shutil.which("openssl") is None:
        pytest.skip(missing_reason() or "openssl is not installed")
    cluster = Cluster()
    try:
        cluster.start()
        for name in ("server.key", "server.crt"):
            path = os.path.join(cluster.data, name)
            if name == "server.key":
                subprocess.run(
                    ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=elsewhere"]
                    + ["-keyout", path, "-out", os.path.join(cluster.data, "server.crt")],
                    check=True,
                    capture_output=True,
                )
            os.chmod(path, 0o600)
            if cluster.user:
                shutil.chown(path, user=cluster.user)
        shutil.copy(os.path.join(cluster.data, "server.crt"), tmp_path / "root.crt")
        with open(os.path.join(cluster.data, "pg_hba.conf"), encoding="utf-8") as handle:
            rest = handle.read()
        with open(os.path.join(cluster.data, "pg_hba.conf"), "w", encoding="utf-8") as handle:
            handle.write(f"hostssl all tls 127.0.0.1/32 scram-sha-256\n{rest}")
        port = free_port()
        cluster.pause()
        cluster.options = f"-c listen_addresses=127.0.0.1 -c port={port} -c ssl=on"
        cluster.resume()
        with pgwire.connect(f"postgresql://postgres@/postgres?host={cluster.socket_dir}&port={port}") as admin:
            admin.execute("CREATE ROLE tls LOGIN PASSWORD 'pw:s'")
            admin.execute("CREATE DATABASE tls OWNER tls")
        base = f"postgresql://tls:pw%3As@127.0.0.1:{port}/tls?sslrootcert={tmp_path / 'root.crt'}&sslmode="
        for mode in ("require", "verify-ca", "prefer"):
            with pgwire.connect(base + mode) as conn:
                row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
                assert row == (True,), mode
        with pytest.raises(pgwire.OperationalError, match="certificate verify failed"):
            pgwire.connect(base + "verify-full")
        probe = (
            "import sys\nfrom cafleet.cli.main import main\ncode = main(sys.argv[1:])\n"
            "assert 'ssl' in sys.modules, 'ssl not loaded'\nsys.exit(code)"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CAFLEET_", "PG"))}
        env.update(CAFLEET_DATABASE_URL=base + "require", HOME=str(tmp_path), CAFLEET_KEEPER="off")
        done = subprocess.run([sys.executable, "-c", probe, "fleet", "list"], env=env, capture_output=True, text=True)
        assert done.returncode == 0 and "no live fleets" in done.stdout, done.stderr
    finally:
        cluster.stop()
