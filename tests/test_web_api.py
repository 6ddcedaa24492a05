"""The WebUI's JSON API, its live event stream and the `cafleet server` command, against a
real database (Starlette's TestClient, a real uvicorn in a thread, and real subprocesses).

Its server helpers live in tests/support/web_server.py.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import os
import signal
import socket
from pathlib import Path

import httpx
import pytest

# --- fixtures -----------------------------------------------------------------------------
from starlette.routing import Route

from cafleet.broker import fleets, members, messages, notifications
from cafleet.web.app import StorePool
from cafleet.web.events import FleetWatch, SharedChanges
from tests.support.web_server import (
    ServerProcess,
    SSEReader,
    count_messages,
    free_port,
    make_app,
    threaded_server,
    web_client,
)

RECORD_KEYS = ["message_id", "from_member_id", "to_member_id", "created_at", "status_state", "status_timestamp", "text"]


@pytest.fixture
def client(db_path, store, env):
    with web_client(make_app(db_path, env), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def trio(build):
    """Fleet with Director and two members on pending placements (nothing is typed into panes)."""
    return build.fleet()


def timeline_record(store, message_id: int) -> dict:
    record = messages.show(store, message_id)
    row = store.execute("SELECT notified_at IS NOT NULL FROM messages WHERE message_id = ?", (message_id,)).fetchone()
    return dict(record, notified=bool(row[0]))


def post(client, payload, **kwargs):
    return client.post("/api/messages", json=payload, **kwargs)


# --- fleets and roster --------------------------------------------------------------------


def test_fleet_list_shows_live_fleets_with_counts(client, build, store):
    alpha, _, _ = build.fleet("alpha", 2)
    beta, _, _ = build.fleet("beta", 1)
    gamma, gamma_director, _ = build.fleet("gamma", 0)
    fleets.delete_fleet(store, beta)
    response = client.get("/api/fleets")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    expected = []
    for fleet_id in (alpha, gamma):
        record = fleets.get_fleet(store, fleet_id)
        del record["deleted_at"]
        expected.append(record)
    assert response.json() == expected
    assert [(f["name"], f["active_members"]) for f in response.json()] == [("alpha", 3), ("gamma", 1)]
    assert response.json()[1]["director_member_id"] == gamma_director


def test_fleet_detail_has_the_fleet_and_its_roster(client, trio, store):
    fleet_id, director, (m1, m2) = trio
    sent = messages.send(store, m1, m2, "hello")
    body = client.get(f"/api/fleets/{fleet_id}").json()
    assert body["fleet"] == fleets.get_fleet(store, fleet_id)
    assert body["keeper"] == {  # the test environment turns the keeper off (tests/test_keeper.py turns it on)
        "running": False,
        "state": "not running",
        "pid": None,
        "since": None,
        "host": None,
        "log": None,
        "heartbeat_age": None,
        "enabled": False,
    }
    assert body["members"][0] == {
        "member_id": director,
        "name": "Director",
        "kind": "director",
        "status": "active",
        "backend": "tmux",
        "coding_agent": "claude",
        "pane_id": "%0",
        "last_activity_at": None,
        "idle_seconds": None,
        "session": "$0@/nonexistent/socket",
        "window_id": "@0",
        "state": "director",
        "state_detail": "",
    }
    first, second = body["members"][1:]
    assert (first["member_id"], first["name"], first["kind"], first["pane_id"]) == (m1, "m1", "member", None)
    assert (first["state"], first["state_detail"]) == ("pending", "its pane is being created")
    assert (second["member_id"], second["name"]) == (m2, "m2")
    assert first["last_activity_at"] == second["last_activity_at"] == sent["created_at"]
    assert first["idle_seconds"] in (0, 1)


def test_deleted_fleet_is_shown_with_an_empty_roster(client, trio, store):
    fleet_id, _, _ = trio
    fleets.delete_fleet(store, fleet_id)
    body = client.get(f"/api/fleets/{fleet_id}").json()
    assert body["fleet"]["deleted_at"] is not None
    assert body["members"] == []


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/api/fleets/999", 404, "fleet 999 not found."),
        ("/api/fleets/999/messages", 404, "fleet 999 not found."),
        ("/api/members/999/inbox", 404, "member 999 not found."),
        ("/api/fleets/0", 400, "fleet id must be a positive integer, got '0'"),
        ("/api/fleets/abc", 400, "fleet id must be a positive integer, got 'abc'"),
        (
            "/api/fleets/99999999999999999999",
            400,
            "fleet id must be at most 9223372036854775807, got '99999999999999999999'",
        ),
        ("/api/members/-1/inbox", 400, "member id must be a positive integer, got '-1'"),
        ("/api/events", 400, "fleet_id is required"),
        ("/api/events?fleet_id=999", 404, "fleet 999 not found."),
        ("/api/nothing-here", 404, "not found"),
        ("/api/messages", 405, "method not allowed"),
    ],
)
def test_errors_are_json_with_the_right_status(client, trio, path, status, error):
    response = client.get(path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": error}


# --- timeline -------------------------------------------------------------------------------


def test_timeline_is_newest_first_paged_and_fleet_scoped(client, build, store):
    alpha, _, (a1, a2) = build.fleet("alpha")
    beta, _, (b1, b2) = build.fleet("beta")
    ids = []
    for sender, recipient, text in [
        (a1, a2, "a-one"),
        (b1, b2, "b-one"),
        (a2, a1, "a-two"),
        (a1, a2, "a-three"),
        (b2, b1, "b-two"),
    ]:
        ids.append(messages.send(store, sender, recipient, text)["message_id"])
    a_ids = [ids[3], ids[2], ids[0]]

    full = client.get(f"/api/fleets/{alpha}/messages").json()
    assert full["fleet_id"] == alpha and full["next_before"] is None
    assert full["messages"] == [timeline_record(store, i) for i in a_ids]
    assert [m["text"] for m in full["messages"]] == ["a-three", "a-two", "a-one"]
    assert list(full["messages"][0]) == [*RECORD_KEYS, "notified"]

    first = client.get(f"/api/fleets/{alpha}/messages?limit=2").json()
    assert [m["message_id"] for m in first["messages"]] == a_ids[:2]
    assert first["next_before"] == a_ids[1]
    rest = client.get(f"/api/fleets/{alpha}/messages?limit=2&before={first['next_before']}").json()
    assert [m["message_id"] for m in rest["messages"]] == a_ids[2:]
    assert rest["next_before"] is None

    other = client.get(f"/api/fleets/{beta}/messages").json()
    assert [m["text"] for m in other["messages"]] == ["b-two", "b-one"]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("limit=0", "limit must be an integer from 1 to 200, got '0'"),
        ("limit=201", "limit must be an integer from 1 to 200, got '201'"),
        ("limit=ten", "limit must be an integer from 1 to 200, got 'ten'"),
        ("before=x", "before must be a positive integer, got 'x'"),
    ],
)
def test_timeline_refuses_bad_paging(client, trio, query, error):
    response = client.get(f"/api/fleets/{trio[0]}/messages?{query}")
    assert (response.status_code, response.json()) == (400, {"error": error})


def test_timeline_shows_notification_and_ack_state(client, trio, store):
    fleet_id, _, (m1, m2) = trio
    to_self = messages.send(store, m1, m1, "note to self")["message_id"]
    plain = messages.send(store, m1, m2, "plain")["message_id"]
    stamped = messages.send(store, m2, m1, "typed into the pane")["message_id"]
    assert notifications.stamp_notified(store, stamped)
    acked = messages.ack(store, plain)
    by_id = {m["message_id"]: m for m in client.get(f"/api/fleets/{fleet_id}/messages").json()["messages"]}
    assert by_id[to_self]["notified"] is True  # self-sends are stamped on insert
    assert by_id[stamped]["notified"] is True
    assert by_id[plain]["notified"] is False
    assert (by_id[plain]["status_state"], by_id[plain]["status_timestamp"]) == ("completed", acked["status_timestamp"])
    assert by_id[stamped]["status_state"] == "input_required"


# --- inbox ----------------------------------------------------------------------------------


def test_inbox_is_the_members_pending_messages_in_poll_order(client, build, store):
    fleet_id, director, (m1, m2) = build.fleet()
    other_fleet, _, (x1,) = build.fleet("other", 1)
    first = messages.send(store, m1, m2, "first")["message_id"]
    acked = messages.send(store, director, m2, "done already")["message_id"]
    third = messages.send(store, director, m2, "third")["message_id"]
    messages.send(store, m2, m1, "to m1")
    messages.ack(store, acked)

    body = client.get(f"/api/members/{m2}/inbox").json()
    assert body["member"] == {"member_id": m2, "fleet_id": fleet_id, "name": "m2", "kind": "member", "status": "active"}
    assert body["messages"] == messages.poll(store, m2)
    assert [m["message_id"] for m in body["messages"]] == [third, first]
    assert list(body["messages"][0]) == RECORD_KEYS

    scoped = client.get(f"/api/members/{m2}/inbox?fleet_id={fleet_id}")
    assert scoped.status_code == 200 and scoped.json() == body
    foreign = client.get(f"/api/members/{m2}/inbox?fleet_id={other_fleet}")
    assert (foreign.status_code, foreign.json()) == (404, {"error": f"member {m2} is not in fleet {other_fleet}"})
    assert client.get(f"/api/members/{x1}/inbox").json()["messages"] == []


# --- sending --------------------------------------------------------------------------------


def test_send_as_the_director_stores_the_message_and_answers_201(client, trio, store):
    _fleet_id, director, (m1, _) = trio
    body = "Please review PR 7.\nLine two — with ünïcode & <b>tags</b>"
    response = post(client, {"from_member_id": director, "to_member_id": m1, "text": body})
    assert response.status_code == 201
    record = response.json()
    assert list(record) == [*RECORD_KEYS, "notified"]
    assert (record["from_member_id"], record["to_member_id"], record["text"]) == (director, m1, body)
    assert record["status_state"] == "input_required"
    assert record["notified"] is False  # a pending placement has no pane to type into
    stored = messages.poll(store, m1)
    assert stored == [{k: record[k] for k in RECORD_KEYS}]
    assert timeline_record(store, record["message_id"])["notified"] is False


def test_a_send_through_the_api_types_the_preview_into_the_members_pane(env, tmp_path, monkeypatch):
    """The API's send is `cafleet message send`'s path: a real pane gets the preview."""
    from tests.support.pane_fleet import preview_line, tmux_fleet

    with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
        worker = fleet.create("worker")["member_id"]
        with web_client(make_app(fleet.db, fleet.environ)) as test_client:
            response = post(
                test_client,
                {"from_member_id": fleet.director, "to_member_id": worker, "text": "Run the suite.\nReport failures."},
            )
        assert response.status_code == 201
        record = response.json()
        assert record["notified"] is True and "warning" not in record
        assert fleet.submits(worker) == [preview_line(record)]
        assert fleet.notified_at(record["message_id"]) is not None
        assert record["status_state"] == "input_required"

        fleet.server.run("kill-pane", "-t", fleet.cafleet("member", "show", str(worker), "--json").json()["pane_id"])
        with web_client(make_app(fleet.db, fleet.environ)) as test_client:
            response = post(test_client, {"from_member_id": fleet.director, "to_member_id": worker, "text": "again"})
        assert response.status_code == 201  # stored; the failed wake-up is a warning, not an error
        failed = response.json()
        assert failed["notified"] is False
        assert failed["warning"].startswith(
            f"Warning: message {failed['message_id']} is stored but member {worker} was not notified: "
        )
        assert failed["warning"].endswith("Do not resend.")
        assert fleet.notified_at(failed["message_id"]) is None


def test_send_refusals_are_json_and_write_nothing(client, build, store):
    fleet_id, director, (m1, m2) = build.fleet()
    other, other_director, (n1,) = build.fleet("other", 1)
    gone = build.member(fleet_id, "gone")
    members.deregister_member(store, gone)
    cases = [
        (
            {"from_member_id": m1, "to_member_id": m2, "text": "x"},
            422,
            f"member {m1} is not the Director of fleet {fleet_id}; the WebUI sends only as a fleet's Director",
        ),
        (
            {"from_member_id": director, "to_member_id": n1, "text": "x"},
            409,
            f"members {director} and {n1} are not in the same fleet; messages never cross fleets.",
        ),
        ({"from_member_id": director, "to_member_id": 999, "text": "x"}, 404, "recipient member 999 not found."),
        ({"from_member_id": 999, "to_member_id": m1, "text": "x"}, 404, "member 999 not found."),
        (
            {"from_member_id": director, "to_member_id": gone, "text": "x"},
            409,
            f"recipient member {gone} is deregistered; it can no longer send or receive messages.",
        ),
        (
            {"from_member_id": director, "to_member_id": m1, "text": " \n\t"},
            422,
            "the body is blank; a message needs a non-blank body",
        ),
        ({"from_member_id": True, "to_member_id": m1, "text": "x"}, 422, "from_member_id must be a positive integer"),
        (
            {"from_member_id": director, "to_member_id": str(m1), "text": "x"},
            422,
            "to_member_id must be a positive integer",
        ),
        ({"from_member_id": director, "to_member_id": 0, "text": "x"}, 422, "to_member_id must be a positive integer"),
        ({"from_member_id": director, "to_member_id": m1, "text": 5}, 422, "text must be a string"),
        ({"from_member_id": director, "to_member_id": m1}, 422, "missing field 'text'"),
        (
            {"from_member_id": director, "to_member_id": m1, "text": "x", "txt": "y"},
            422,
            "unexpected field 'txt'; expected from_member_id, to_member_id, text",
        ),
        ([director, m1, "x"], 422, "request body must be a JSON object"),
    ]
    for payload, status, error in cases:
        response = post(client, payload)
        assert (response.status_code, response.json()) == (status, {"error": error}), payload
    raw_cases = [
        (b'{"from_member_id": 1,', 400, "request body is not valid UTF-8 JSON"),
        (b"\xff\xfe{}", 400, "request body is not valid UTF-8 JSON"),
        (
            b'{"from_member_id": %d, "to_member_id": %d, "text": "\\ud800"}' % (director, m1),
            422,
            "text is not valid UTF-8",
        ),
    ]
    for raw, status, error in raw_cases:
        response = client.post("/api/messages", content=raw, headers={"content-type": "application/json"})
        assert (response.status_code, response.json()) == (status, {"error": error}), raw
    fleets.delete_fleet(store, other)
    response = post(client, {"from_member_id": other_director, "to_member_id": n1, "text": "x"})
    assert response.status_code == 409
    assert response.json()["error"].startswith(f"fleet {other} was deleted at ")
    assert count_messages(store) == 0


def test_oversized_body_is_refused_413(client, trio, store):
    _, director, (m1, _) = trio
    payload = json.dumps({"from_member_id": director, "to_member_id": m1, "text": "x" * (1024 * 1024)})
    response = client.post("/api/messages", content=payload, headers={"content-type": "application/json"})
    assert (response.status_code, response.json()) == (413, {"error": "request body is larger than 1048576 bytes"})
    assert count_messages(store) == 0


# --- failures never leak tracebacks ---------------------------------------------------------


def test_a_corrupt_row_is_a_json_500_with_the_brokers_sentence(client, trio, store):
    fleet_id, _, (m1, m2) = trio
    message_id = messages.send(store, m1, m2, "x")["message_id"]
    with store.write():
        store.execute("UPDATE messages SET status_state = 'lost' WHERE message_id = ?", (message_id,))
    response = client.get(f"/api/fleets/{fleet_id}/messages")
    assert response.status_code == 500
    assert response.json() == {
        "error": f"message {message_id} has an unknown status_state 'lost' in the database "
        "(expected input_required or completed); repair the row or use a newer cafleet."
    }


def test_an_unexpected_exception_is_a_json_500_and_one_log_line(db_path, store, env, capfd):
    app = make_app(db_path, env)

    def broken(request):
        return {}["missing"]

    app.router.routes.insert(0, Route("/api/broken", broken))
    with web_client(app, raise_server_exceptions=False) as test_client:
        response = test_client.get("/api/broken")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error (KeyError); see the server log"}
    assert "Traceback" not in response.text
    err = capfd.readouterr().err
    assert err == "cafleet server: internal error on GET /api/broken: KeyError: 'missing'\n"


def end_sessions(store) -> int:
    """Have the server end every other session of the test's database, as a restart or an
    administrator does; returns how many, once they are gone."""
    return store.execute(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 30000)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()[0]


@pytest.mark.stores("postgres")  # a server that ends its clients' sessions is PostgreSQL's
def test_pooled_connections_the_server_ended_are_replaced_not_answered_500(client, trio, store, capfd, monkeypatch):
    """Before: each pooled connection the server had ended answered one request with a 500
    (psycopg's "the connection is closed", raised by the pool's own ROLLBACK)."""
    import contextlib

    fleet_id, director, (m1, _) = trio
    pool = client.app.state.pool
    with contextlib.ExitStack() as borrowed:
        for _ in range(pool.keep):
            borrowed.enter_context(pool.borrow())  # all given back at once: the pool is full
    assert end_sessions(store) >= pool.keep
    for _ in range(pool.keep + 1):
        response = client.get(f"/api/fleets/{fleet_id}")
        assert response.status_code == 200, response.text
    response = post(client, {"from_member_id": director, "to_member_id": m1, "text": "after the restart"})
    assert response.status_code == 201, response.text
    assert count_messages(store) == 1

    # A session ended between that check and the request's query (the check is pretended
    # away): the request fails with the database's one line, never a 500, and the
    # connection is not kept.
    idle = len(pool._idle)
    assert idle >= 1 and end_sessions(store) >= 1  # the connection the last requests used
    with monkeypatch.context() as patch:
        patch.setattr(type(store), "usable", lambda self: True)
        response = client.get(f"/api/fleets/{fleet_id}")
    assert response.status_code == 503
    assert response.json()["error"].startswith(f"cannot reach database {store.path}: ")
    assert len(pool._idle) == idle - 1
    assert client.get(f"/api/fleets/{fleet_id}").status_code == 200
    assert "internal error" not in capfd.readouterr().err


@pytest.mark.stores("postgres")  # SQLite's errors were already translated here
def test_a_postgres_error_raised_while_rows_are_read_is_the_databases_one_line_not_a_500(
    client, trio, store, capfd, monkeypatch
):
    """Before: the pool translated only SQLite's exceptions, so a PostgreSQL one raised
    while a handler read its rows (outside the store's own translation) was a 500. The
    driver reads a result whole, so the failure is a stand-in: its cursor raising what a
    lost session raises."""
    from cafleet.store import libpq

    fleet_id, _, _ = trio
    assert client.get(f"/api/fleets/{fleet_id}").status_code == 200  # a pooled connection, open and diagnosed

    def lost(self):
        raise libpq.OperationalError("server closed the connection unexpectedly")

    with monkeypatch.context() as patch:
        patch.setattr(libpq.Cursor, "fetchall", lost)
        patch.setattr(libpq.Cursor, "fetchone", lost)
        response = client.get(f"/api/fleets/{fleet_id}")
    assert response.status_code == 503, response.text
    assert response.json()["error"] == (
        f"cannot reach database {store.path}: server closed the connection unexpectedly; check the server and the URL."
    )
    assert client.get(f"/api/fleets/{fleet_id}").status_code == 200
    assert "internal error" not in capfd.readouterr().err


# --- the live stream ------------------------------------------------------------------------


@pytest.fixture
def watch_for(db_path, store):
    """A FleetWatch as the server makes one (reading through a pool, woken by the shared
    change waiter), whose ``look()`` checks the waiter and polls, as a stream's tick does."""
    pool = StorePool(db_path, 5.0)
    changes = SharedChanges(pool, 0.0)
    if store.engine == "postgresql":
        # A NOTIFY reaches the listener a moment after the commit, not before the very
        # next line; these tests check the diffs, so every look reads. The wake-up is
        # test_event_stream_pushes_writes_from_other_processes's (and test_postgres.py's).
        changes = _EveryLook()

    def make(fleet_id: int) -> FleetWatch:
        watch = FleetWatch(pool, fleet_id, changes)  # type: ignore[arg-type]

        def look():
            changes.check()
            return watch.poll()

        watch.look = look  # type: ignore[attr-defined]
        return watch

    yield make
    changes.close()
    pool.close()


class _EveryLook:
    """A change waiter that has always seen a commit."""

    generation = 0

    def baseline(self) -> int:
        return self.generation

    def check(self) -> int:
        self.generation += 1
        return self.generation

    def close(self) -> None:
        return None


def roster_view(store, fleet_id):
    from cafleet.web.api import fleet_view, member_states

    return fleet_view(store, fleet_id, member_states(store, fleet_id))


def without_idle(event):
    name, data = event
    if name != "roster":
        return event
    return name, {
        "fleet": data["fleet"],
        "members": [{k: v for k, v in m.items() if k != "idle_seconds"} for m in data["members"]],
    }


def test_fleet_watch_turns_commits_into_typed_events(watch_for, build, store):
    fleet_id, director, (m1, m2) = build.fleet()
    _other, _, (x1, x2) = build.fleet("other")
    watch = watch_for(fleet_id)
    assert watch.look() == []

    sent = messages.send(store, m1, m2, "hi")["message_id"]
    assert [without_idle(e) for e in watch.look()] == [
        ("message", timeline_record(store, sent)),
        without_idle(("roster", roster_view(store, fleet_id))),
    ]
    assert watch.look() == []

    assert notifications.stamp_notified(store, sent)
    assert watch.look() == [("notified", timeline_record(store, sent))]

    messages.ack(store, sent)
    events = watch.look()
    assert events[0] == ("ack", timeline_record(store, sent)) and events[0][1]["status_state"] == "completed"
    assert [name for name, _ in events] == ["ack", "roster"]  # the ACK is the recipient's latest activity

    messages.send(store, x1, x2, "elsewhere")
    assert watch.look() == []  # another fleet's traffic changes nothing here

    quick = messages.send(store, director, m1, "sent and acked between two looks")["message_id"]
    messages.ack(store, quick)
    events = watch.look()
    assert events[0] == ("message", timeline_record(store, quick)) and events[0][1]["status_state"] == "completed"
    assert [name for name, _ in events] == ["message", "roster"]

    new_member = build.member(fleet_id, "m3")
    events = watch.look()
    assert [name for name, _ in events] == ["roster"]
    assert [m["member_id"] for m in events[0][1]["members"]] == [director, m1, m2, new_member]

    fleets.delete_fleet(store, fleet_id)
    events = watch.look()
    assert [name for name, _ in events] == ["roster"]
    assert events[0][1]["members"] == [] and events[0][1]["fleet"]["deleted_at"] is not None


def test_event_stream_pushes_writes_from_other_processes(db_path, env, trio, store, run_cli):
    fleet_id, _director, (m1, m2) = trio
    with threaded_server(db_path, env, poll_interval=0.05, keepalive_interval=0.4) as (url, _, _):
        reader = SSEReader(f"{url}/api/events?fleet_id={fleet_id}")
        assert reader.status == 200
        assert reader.headers["content-type"].startswith("text/event-stream")
        assert reader.headers["cache-control"] == "no-store"
        assert reader.headers["x-content-type-options"] == "nosniff"

        sent = run_cli(
            "message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "from the CLI", "--json"
        )
        assert sent.code == 0, sent
        record = sent.json()
        name, data = reader.next()
        assert (name, data) == ("message", record)  # the CLI's --json record: public fields + notified
        assert reader.next()[0] == "roster"

        assert run_cli("message", "ack", str(record["message_id"])).code == 0
        name, data = reader.next()
        assert name == "ack" and data == timeline_record(store, record["message_id"])
        assert reader.next()[0] == "roster"

        assert reader.comments.get(timeout=30) == "connected"
        assert reader.comments.get(timeout=30) == "keep-alive"  # nothing happened for 0.4 s
        assert reader.quiet(0.3)


def test_event_streams_end_when_the_server_stops(db_path, env, trio):
    with threaded_server(db_path, env, poll_interval=0.05) as (url, server, thread):
        readers = [SSEReader(f"{url}/api/events?fleet_id={trio[0]}") for _ in range(2)]
        server.should_exit = True
        thread.join(30)  # the timeouts only bound a failure: an open stream would hold the server
        assert not thread.is_alive()
        assert all(reader.ended.wait(30) for reader in readers)


# --- the `cafleet server` command -----------------------------------------------------------


def test_server_prints_its_url_serves_and_stops_cleanly_on_sigterm(env, trio):
    port = free_port()
    server = ServerProcess(env, "--port", str(port))
    try:
        assert server.first_line == f"serving the cafleet WebUI at http://127.0.0.1:{port}/"
        response = httpx.get(f"{server.url}api/fleets/{trio[0]}", headers=server.headers, timeout=5)
        assert response.status_code == 200 and response.json()["fleet"]["name"] == "alpha"
        page = httpx.get(server.url, timeout=5)
        assert page.status_code == 200 and "<title>cafleet</title>" in page.text
    finally:
        code, out, err = server.stop(signal.SIGTERM)
    assert (code, out, err) == (0, "", "")


def test_server_takes_host_and_port_from_the_environment_and_ends_on_ctrl_c(env, trio):
    port = free_port()
    server = ServerProcess(dict(env, CAFLEET_BROKER_HOST="localhost", CAFLEET_BROKER_PORT=str(port)))
    try:
        assert server.first_line == f"serving the cafleet WebUI at http://localhost:{port}/"
        reader = SSEReader(
            f"{server.url}api/events?fleet_id={trio[0]}", headers=server.headers
        )  # an open stream must not block shutdown
        assert reader.status == 200
    finally:
        code, out, err = server.stop(signal.SIGINT)
    assert (code, out, err) == (0, "", "")


@pytest.mark.parametrize(
    ("args", "environ", "code", "error"),
    [
        (["--port", "70000"], {}, 2, "--port must be a port number from 1 to 65535, got '70000'."),
        (["--port", "http"], {}, 2, "--port must be a port number from 1 to 65535, got 'http'."),
        (
            [],
            {"CAFLEET_BROKER_PORT": "eighty"},
            2,
            "CAFLEET_BROKER_PORT must be a port number from 1 to 65535, got 'eighty'.",
        ),
        ([], {"CAFLEET_BROKER_PORT": "0"}, 2, "CAFLEET_BROKER_PORT must be a port number from 1 to 65535, got '0'."),
        (
            ["--host", "0.0.0.0"],
            {},
            2,
            "--host 0.0.0.0 is a wildcard address; give the address or name that browsers "
            "will use (the server only answers requests addressed to it).",
        ),
        (
            [],
            {"CAFLEET_BROKER_HOST": "http://x/"},
            1,
            "CAFLEET_BROKER_HOST must be a host name or IP address, got 'http://x/'.",
        ),
    ],
)
def test_server_refuses_bad_settings_in_one_line(cli, env, args, environ, code, error):
    result = cli("server", *args, environ=dict(env, **environ))
    assert (result.code, result.out, result.err) == (code, "", f"Error: {error}\n")


@pytest.mark.stores("sqlite")  # it writes a foreign file at the database path
def test_server_refuses_a_bad_database_before_binding(cli, env, db_path):
    os.makedirs(os.path.dirname(db_path), exist_ok=True)
    Path(db_path).write_bytes(b"this is not a database" * 100)
    port = free_port()
    result = cli("server", "--port", str(port))
    assert result.code == 1 and result.out == ""
    assert result.err.startswith(f"Error: {db_path} ") and result.err.count("\n") == 1
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # nothing was left listening


def test_server_reports_a_busy_port_in_one_line(cli, store):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = cli("server", "--port", str(port))
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"Error: cannot listen on 127.0.0.1:{port}: Address already in use; "
        "choose another --port or stop the program using it.\n"
    )
