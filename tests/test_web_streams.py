"""What the WebUI's event streams cost the database: real `cafleet server` processes (or a
real uvicorn), real HTTP clients on 127.0.0.1.

A server process learns of commits through one change waiter shared by every stream (on
PostgreSQL one LISTEN session, on SQLite one connection reading ``PRAGMA data_version``),
reads each stream's fleet through its bounded connection pool, and answers a stream past
``CAFLEET_SERVER_MAX_STREAMS`` with 503 and ``Retry-After``. So however many pages are
open, the server holds a bounded number of database sessions, and the commands of every
other process keep working.

The session-limit test runs a PostgreSQL cluster of its own with ``max_connections=100``:
the limit that failed is the server's, shared by every database, role and host, so the
honest reproduction is a server that has only that many sessions (a per-database
``CONNECTION LIMIT`` on the suite's shared cluster would be another limit, with another
error, counted apart from the sessions of the rest of the suite).
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here that takes a store runs on both (tests/conftest.py)

import socket

import httpx
import pytest

from cafleet.broker import fleets, members
from cafleet.store.engines import open_store
from cafleet.web.app import POOL_SIZE
from tests.support import postgres
from tests.support.environ import isolated_environ
from tests.support.tmux_fixtures import wait_for
from tests.support.web_server import AUTH, ServerProcess, SSEReader, free_port, threaded_server

SERVER_APP = "cafleet-webui-under-test"  # the server's sessions are named so (PGAPPNAME)
STREAMS = 200
STREAM_CAP = 150  # more streams than the database has sessions, all served


@pytest.fixture(scope="module")
def small_cluster():
    """A PostgreSQL server with 100 sessions at most, stopped at teardown."""
    reason = postgres.missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = postgres.Cluster(max_connections=100)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


def make_fleet(url: str) -> tuple[int, int, int, int]:
    """A fleet with a Director and two members on pending placements (nothing is typed)."""
    store = open_store(url)
    try:
        fleet = fleets.create_fleet(
            store,
            name="crowd",
            coding_agent="claude",
            backend="tmux",
            session="$0@/nonexistent/socket",
            window_id="@0",
            pane_id="%0",
        )
        ids = [
            members.register_member(
                store,
                fleet_id=fleet["fleet_id"],
                name=name,
                description=f"{name} worker",
                backend="tmux",
                session="$0@/nonexistent/socket",
                window_id="@0",
                coding_agent="claude",
            )
            for name in ("m1", "m2")
        ]
    finally:
        store.close()
    return fleet["fleet_id"], fleet["director_member_id"], ids[0], ids[1]


def server_sessions(url: str) -> tuple[int, int]:
    """(all sessions, LISTEN sessions) the server under test holds on the database."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE query LIKE 'LISTEN %%') FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            (SERVER_APP,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def listen_sessions(url: str) -> int:
    """How many sessions on the URL's database last ran LISTEN (a change waiter's)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %%' "
            "AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def cli(env: dict, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "cafleet", *args], capture_output=True, env=env, timeout=60, text=True)


def test_two_hundred_streams_against_a_hundred_session_server_leave_every_command_working(small_cluster, tmp_path):
    url = small_cluster.fresh_database()
    env = isolated_environ(tmp_path / "home", CAFLEET_DATABASE_URL=url)
    fleet_id, director, m1, m2 = make_fleet(url)
    server = ServerProcess(
        dict(
            env,
            PGAPPNAME=SERVER_APP,
            CAFLEET_SERVER_MAX_CONNECTIONS="400",  # the connection limit is not what is tested here
            CAFLEET_SERVER_MAX_STREAMS=str(STREAM_CAP),
        ),
        "--port",
        str(free_port()),
    )
    readers: list[SSEReader] = []
    client = httpx.Client(limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))
    try:
        assert server.url is not None, server.stop()
        for _ in range(STREAMS):  # one at a time: each reader returns once its answer started
            readers.append(SSEReader(f"{server.url}api/events?fleet_id={fleet_id}", client, server.headers))
        served = [reader for reader in readers if reader.status == 200]
        refused = [reader for reader in readers if reader.status != 200]
        assert (len(served), len(refused)) == (STREAM_CAP, STREAMS - STREAM_CAP)
        assert {(reader.status, reader.headers["retry-after"]) for reader in refused} == {(503, "2")}
        answer = httpx.get(f"{server.url}api/events?fleet_id={fleet_id}", headers=server.headers, timeout=30)
        assert (answer.status_code, answer.headers["retry-after"], answer.json()) == (
            503,
            "2",
            {"error": f"{STREAM_CAP} event streams are open, the most this server serves; retry in 2 s"},
        )
        assert all(reader.comments.get(timeout=30) == "connected" for reader in served)

        sessions, listening = server_sessions(url)
        assert listening == 1  # one LISTEN session for all 150 streams
        assert sessions <= 1 + POOL_SIZE

        # Other processes' commands are unaffected: a send stores and prints its id, a poll
        # lists it, and every open stream hears of it.
        sent = cli(env, "message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "still works")
        assert (sent.returncode, sent.stdout, sent.stderr) == (0, f"sent message 1 to member {m2}\n", "")
        polled = cli(env, "message", "poll", str(m2), "--json")
        assert polled.returncode == 0, polled.stderr
        assert [record["text"] for record in __import__("json").loads(polled.stdout)] == ["still works"]
        for reader in served:
            name, data = reader.next(timeout=60)
            assert (name, data["message_id"], data["text"]) == ("message", 1, "still works")
        assert server_sessions(url)[0] <= 1 + POOL_SIZE
        directed = cli(env, "message", "send", "--from-member-id", str(director), "--to-member-id", str(m1), "ok")
        assert directed.returncode == 0, directed.stderr
    finally:
        code, out, err = server.stop()
        client.close()
    assert (code, out, err) == (0, "", "")
    assert all(reader.ended.wait(30) for reader in readers)


def open_stream(base: str, fleet_id: int) -> tuple[socket.socket, str]:
    """A raw HTTP/1.1 event-stream request; the socket and the answer's head."""
    host, port = base.removeprefix("http://").rstrip("/").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        f"GET /api/events?fleet_id={fleet_id} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: {AUTH['authorization']}\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return sock, head.decode("latin-1")


def test_a_stream_past_the_cap_is_refused_503_with_retry_after_and_a_closed_one_frees_its_slot(
    db_path, env, build, store
):
    fleet_id, _, _ = build.fleet()
    with threaded_server(db_path, env, poll_interval=0.05, max_streams=2) as (url, _, _):
        first, head = open_stream(url, fleet_id)
        assert head.startswith("HTTP/1.1 200 ")
        second, head = open_stream(url, fleet_id)
        assert head.startswith("HTTP/1.1 200 ")
        refused = httpx.get(f"{url}/api/events?fleet_id={fleet_id}", headers=AUTH, timeout=30)
        assert (refused.status_code, refused.headers["retry-after"], refused.json()) == (
            503,
            "2",
            {"error": "2 event streams are open, the most this server serves; retry in 2 s"},
        )
        assert (
            httpx.get(f"{url}/api/fleets/{fleet_id}", headers=AUTH, timeout=30).status_code == 200
        )  # requests still served
        first.close()  # a page closed: its slot comes back

        def another_is_served() -> bool:
            sock, head = open_stream(url, fleet_id)
            if head.startswith("HTTP/1.1 200 "):
                third.append(sock)
                return True
            sock.close()
            assert head.startswith("HTTP/1.1 503 ")
            return False

        third: list[socket.socket] = []
        wait_for(another_is_served, timeout=30, interval=0.1, what="the closed stream's slot to come back")
        if store.engine == "postgresql":
            assert listen_sessions(db_path) == 1  # one for both open streams
        for sock in (second, *third):
            sock.close()
        if store.engine == "postgresql":  # no stream open: the LISTEN session is let go
            wait_for(lambda: listen_sessions(db_path) == 0, timeout=30, what="the LISTEN session to end")


def test_the_pool_lends_at_most_its_limit_and_answers_the_next_borrower_with_one_line(db_path, store):
    from cafleet.errors import DatabaseError
    from cafleet.web.app import StorePool

    pool = StorePool(db_path, 0.2, limit=2)
    try:
        with pool.borrow() as one, pool.borrow() as two:
            assert one is not two
            with pytest.raises(DatabaseError) as refused, pool.borrow():
                pass
            assert (
                str(refused.value) == "all 2 database connections of this server are in use (waited 0.2 s); try again."
            )
        with pool.borrow() as again:  # given back: lent again
            assert again in (one, two)
    finally:
        pool.close()
