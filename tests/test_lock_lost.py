"""A pane-input lock lost while its holder types: on PostgreSQL the lock is a session
advisory lock, and a session can end under a live sender (an administrator's
``pg_terminate_backend``, a server restart, an idle timeout, keepalives giving up on a
partitioned host). Another sender may then take the lock and type into the same pane.

So before each call that sends keys (typing, Enter, BackSpace) a PostgreSQL holder asks
its lock's own session whether it still holds the lock; when it does not, it stops with
one line, and if it had typed anything it takes the lock again and removes its own text
(only when the input box shows exactly that text, or the start of it), pressing no Enter.

Real parts: two real senders (the command line, held at a named step by
:mod:`cafleet.faults`), a private tmux server, the stand-in agent, the suite's PostgreSQL
server; the lock's session is ended with ``pg_terminate_backend`` while the sender stands
at the step. On SQLite the lock is an ``flock``, which its living holder cannot lose: the
path is unchanged and checks nothing (tests/test_lock.py).
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # the tests below are PostgreSQL's (tests/conftest.py)

import pytest

from cafleet.store.postgres import pane_key
from tests.support.pane_fleet import preview_line, tmux_fleet
from tests.support.pause import held_commands
from tests.support.tmux_fixtures import wait_for

SENDER_A, SENDER_B = "cafleet-sender-a", "cafleet-sender-b"  # their sessions' application_name


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


@pytest.fixture
def held(tmp_path):
    """``held(environ, point, *args)``: a real command paused at ``point`` (tests/support/pause.py)."""
    yield from held_commands(tmp_path)


def not_notified(message_id: int, member_id: int, reason: str) -> str:
    return (
        f"Warning: message {message_id} is stored but member {member_id} was not notified: {reason}. "
        # the keeper is off in tests, and the test's only fleet is fleet 1
        "The fleet keeper is off (CAFLEET_KEEPER=off; `cafleet fleet watch 1` does its work while it runs). "
        f"The preview will be retried by the next send to member {member_id} or a later "
        "`cafleet message wait`. Do not resend.\n"
    )


def lost(pane: str, after: str) -> str:
    return f"the pane-input lock for pane {pane} was lost (its database session ended), so typing stopped; {after}"


def lock_holders(fleet, member_id: int) -> list[tuple[int, str]]:
    """(pid, application_name) of each session holding the member pane's advisory lock."""
    import psycopg

    placement = fleet.cafleet("member", "show", str(member_id), "--json").json()["placement"]
    key = pane_key("tmux", placement["session"], placement["pane_id"])
    with psycopg.connect(fleet.db, autocommit=True) as conn:
        return [
            (int(pid), str(name))
            for pid, name in conn.execute(
                "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid",
                ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
            ).fetchall()
        ]


def end_session(fleet, pid: int) -> None:
    """``pg_terminate_backend``, then wait (bounded) until the server has ended the session."""
    import psycopg

    with psycopg.connect(fleet.db, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)

        def gone() -> bool:
            return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == (0,)

        wait_for(gone, timeout=30, what=f"the server to end session {pid}")


def send_args(fleet, member: int, body: str) -> tuple[str, ...]:
    return ("message", "send", "--from-member-id", str(fleet.director), "--to-member-id", str(member), body)


@pytest.mark.stores("postgres")
def test_a_sender_whose_lock_session_ended_types_nothing_into_the_pane_another_sender_took(fleet, held):
    dave = fleet.create("dave")
    member, pane = dave["member_id"], dave["pane_id"]
    # Sender A takes the pane's lock for message 1 and stands there, nothing typed yet.
    a, release_a = held(
        dict(fleet.environ, PGAPPNAME=SENDER_A, CAFLEET_LOCK_TIMEOUT="3"),
        "drain.locked",
        *send_args(fleet, member, "first"),
    )
    [(pid, name)] = lock_holders(fleet, member)
    assert name == SENDER_A
    end_session(fleet, pid)  # A's lock is gone; A does not know yet

    # Sender B takes the free lock and types message 1's preview (the oldest owed); it
    # stands before its Enter, holding the lock.
    b, release_b = held(dict(fleet.environ, PGAPPNAME=SENDER_B), "submit.typed", *send_args(fleet, member, "second"))
    assert [name for _, name in lock_holders(fleet, member)] == [SENDER_B]
    line1 = preview_line(fleet.cafleet("message", "show", "1", "--json").json())
    wait_for(lambda: fleet.input_row(pane) == "> " + line1, what="B's typed preview")

    release_a()  # A carries on: its lock is lost, so it must not type into B's pane
    out_a, err_a = a.communicate(timeout=60)
    assert fleet.input_row(pane) == "> " + line1  # only B's copy, nothing glued to it
    release_b()
    out_b, err_b = b.communicate(timeout=60)

    assert (a.returncode, out_a.decode()) == (0, f"sent message 1 to member {member}\n")
    assert err_a.decode() == not_notified(1, member, lost(pane, "nothing had been typed"))
    assert (b.returncode, out_b.decode(), err_b.decode()) == (0, f"sent message 2 to member {member}\n", "")
    line2 = preview_line(fleet.cafleet("message", "show", "2", "--json").json())
    assert fleet.submits(member) == [line1, line2]  # each once, whole
    assert fleet.query("SELECT COUNT(*) FROM messages WHERE notified_at IS NULL") == [(0,)]

    after = fleet.send(fleet.director, member, "third", "--json")  # the pane is not stuck
    assert (after.code, after.err, after.json()["notified"]) == (0, "", True)
    assert fleet.submits(member) == [line1, line2, preview_line(after.json())]


@pytest.mark.stores("postgres")
def test_a_sender_whose_lock_session_ended_after_typing_takes_its_text_back_and_presses_no_enter(fleet, held):
    erin = fleet.create("erin")
    member, pane = erin["member_id"], erin["pane_id"]
    a, release_a = held(dict(fleet.environ, PGAPPNAME=SENDER_A), "submit.typed", *send_args(fleet, member, "first"))
    line1 = preview_line(fleet.cafleet("message", "show", "1", "--json").json())
    wait_for(lambda: fleet.input_row(pane) == "> " + line1, what="A's typed preview")
    [(pid, name)] = lock_holders(fleet, member)
    assert name == SENDER_A
    end_session(fleet, pid)

    release_a()
    out, err = a.communicate(timeout=60)
    assert (a.returncode, out.decode()) == (0, f"sent message 1 to member {member}\n")
    assert err.decode() == not_notified(1, member, lost(pane, "the typed text was taken back"))
    assert fleet.input_row(pane) == ">"  # the box is empty again (a capture drops trailing blanks)
    assert fleet.submits(member) == []  # no Enter without the lock
    assert fleet.notified_at(1) is None  # still owed
    assert lock_holders(fleet, member) == []

    nxt = fleet.send(fleet.director, member, "next", "--json")
    assert (nxt.code, nxt.err, nxt.json()["notified"]) == (0, "", True)
    assert fleet.submits(member) == [line1, preview_line(nxt.json())]


@pytest.mark.stores("postgres")
def test_member_prompt_whose_lock_session_ended_stops_with_one_line_and_takes_its_text_back(fleet, held):
    frank = fleet.create("frank")
    member, pane = frank["member_id"], frank["pane_id"]
    prompt, release = held(
        dict(fleet.environ, PGAPPNAME=SENDER_A), "submit.typed", "member", "prompt", str(member), "run the tests"
    )
    wait_for(lambda: fleet.input_row(pane) == "> run the tests", what="the typed prompt")
    [(pid, _)] = lock_holders(fleet, member)
    end_session(fleet, pid)

    release()
    out, err = prompt.communicate(timeout=60)
    assert (prompt.returncode, out.decode()) == (1, "")
    assert err.decode() == f"Error: {lost(pane, 'the typed text was taken back')}.\n"
    assert fleet.input_row(pane) == ">"
    assert fleet.submits(member) == []
