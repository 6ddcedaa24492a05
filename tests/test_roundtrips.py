"""Round trips to PostgreSQL, counted at a proxy (tests/support/rtt_proxy.py) rather than
timed: what one command costs over a slow link is its round trips times the RTT
(bench/pg_roundtrips.py measures that, docs/performance.md has the table). The counts
depend on the protocol conversation only, so they are exact here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import FleetBuilder
from tests.support.rtt_proxy import DelayProxy
from tests.support.tmux_fixtures import wait_for


@pytest.fixture
def proxied(env, pg_cluster):
    """(environment naming the database through the proxy, the proxy, the id of a message
    to ack, its recipient)."""
    from cafleet.broker import messages
    from cafleet.store.engines import open_store

    url = pg_cluster.fresh_database()
    store = open_store(url)
    _, director, [worker] = FleetBuilder(store).fleet(members_count=1)
    message_id = messages.send(store, director, worker, "to ack")["message_id"]
    store.close()
    proxy = DelayProxy(os.path.join(pg_cluster.socket_dir, ".s.PGSQL.5432"), 0.0)
    database = url.split("@/", 1)[1].split("?", 1)[0]
    proxied_env = dict(env, CAFLEET_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{proxy.port}/{database}")
    try:
        yield proxied_env, proxy, message_id, worker
    finally:
        proxy.stop()


def counted(proxy, environ, *args) -> tuple[int, int]:
    """(connections, round trips) of one ``cafleet`` command, once all it sent is answered."""
    proxy.reset()
    done = subprocess.run(
        [sys.executable, "-m", "cafleet", *args], env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    wait_for(lambda: proxy.snapshot() and not any(link.waiting and link.answered == 0 for link in proxy.snapshot()))
    links = proxy.snapshot()
    return len(links), sum(link.round_trips for link in links)


def test_a_read_costs_the_set_up_and_one_round_trip(proxied):
    """The TCP handshake, TLS asked and refused (``sslmode=prefer``, as libpq), the login,
    the store's one-round-trip open, then the read: five, on one connection."""
    environ, proxy, _, _ = proxied
    assert counted(proxy, environ, "fleet", "list") == (1, 5)


def test_a_poll_that_finds_messages_is_one_statement(proxied):
    """Rows prove the member exists: it is looked up only for an empty inbox."""
    environ, proxy, _, worker = proxied
    assert counted(proxy, environ, "message", "poll", str(worker)) == (1, 5)


def test_a_write_costs_the_set_up_and_two_round_trips(proxied):
    """A write transaction's opening (BEGIN and the writers' lock) travels with its first
    statement, then the commit: ``message ack`` is the set-up's four and two."""
    environ, proxy, message_id, _ = proxied
    assert counted(proxy, environ, "message", "ack", str(message_id)) == (1, 6)


def test_a_send_trusts_the_opens_look_at_the_auxiliary_tables(proxied):
    """The open's one round trip already said which usage tables exist: the send's budget
    check does not ask the catalogue again (set-up + 5: the placements read to decide who
    the caller is (docs/security.md), the transaction opened with the one read of both
    members and their fleet's Director, the insert, the commit, the preview's placement
    read)."""
    environ, proxy, _, worker = proxied
    assert counted(proxy, environ, "message", "send", "--from-member-id", str(worker), "--to-member-id", "1", "hi") == (
        1,
        9,
    )


def test_member_lists_round_trips_do_not_grow_with_the_fleet(proxied, pg_cluster):
    """The roster's activity is walked for all members together (broker/activity.py): ten
    more members, each given a task it answered and had ACKed, cost no round trip more."""
    from cafleet.broker import messages
    from cafleet.store.engines import open_store

    environ, proxy, message_id, _worker = proxied
    small = counted(proxy, environ, "member", "list", "1")
    store = open_store(environ["CAFLEET_DATABASE_URL"])
    try:
        messages.ack(store, message_id)
        for n in range(10):
            crew = FleetBuilder(store).member(1, f"c{n}")
            messages.send(store, 1, crew, "task")
            messages.ack(store, messages.send(store, crew, 1, "done")["message_id"])
    finally:
        store.close()
    big = counted(proxy, environ, "member", "list", "1")
    assert small == big == (1, 8)  # the set-up, the live fleet with its Director, the roster, two steps of the walk
