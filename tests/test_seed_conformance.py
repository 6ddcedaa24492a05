"""The stored format as the seed defines it, against rows another program may have written.

Each odd state is made with a plain ``sqlite3`` connection on the real database file (as a
foreign writer would), then the real commands run in-process. What is checked is what the
command says and what the file holds afterwards.
"""

from __future__ import annotations

import sqlite3

import pytest

from cafleet import clock
from cafleet.store.engines import open_store

PAUSED = "has an unknown status 'paused' in the database (expected active or deregistered)"
ARCHIVED = "has an unknown status_state 'archived' in the database (expected input_required or completed)"


def raw(db_path: str, sql: str, params=()) -> list:
    """One statement through a connection of its own, committed, as another program would."""
    conn = sqlite3.connect(db_path)
    try:
        rows = conn.execute(sql, params).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def one_line_error(result, *fragments: str) -> None:
    assert result.code == 1, result
    assert result.out == ""
    assert result.err.startswith("Error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


# --- unknown member status -----------------------------------------------------------------


def test_member_list_refuses_an_unknown_member_status(cli, build, db_path):
    fleet_id, _, (m1, _) = build.fleet()
    raw(db_path, "UPDATE members SET status = 'paused' WHERE member_id = ?", (m1,))
    one_line_error(cli("member", "list", str(fleet_id)), f"member {m1} {PAUSED}")
    one_line_error(cli("member", "list", str(fleet_id), "--json"), f"member {m1} {PAUSED}")


def test_fleet_list_and_show_refuse_an_unknown_member_status(cli, build, db_path):
    fleet_id, _, (m1, _) = build.fleet()
    raw(db_path, "UPDATE members SET status = 'paused' WHERE member_id = ?", (m1,))
    one_line_error(cli("fleet", "list"), f"member {m1} {PAUSED}")
    one_line_error(cli("fleet", "show", str(fleet_id)), f"member {m1} {PAUSED}")


def test_broadcast_refuses_an_unknown_member_status_and_sends_nothing(cli, build, db_path):
    _fleet_id, director, (_m1, m2) = build.fleet()
    raw(db_path, "UPDATE members SET status = 'paused' WHERE member_id = ?", (m2,))
    result = cli("message", "broadcast", "--from-member-id", str(director), "hello all")
    one_line_error(result, f"member {m2} {PAUSED}")
    assert raw(db_path, "SELECT count(*) FROM messages") == [(0,)]


def test_fleet_delete_refuses_an_unknown_member_status_and_changes_nothing(cli, build, db_path):
    fleet_id, _, (_m1, m2) = build.fleet()
    raw(db_path, "UPDATE members SET status = 'paused' WHERE member_id = ?", (m2,))
    before = raw(db_path, "SELECT * FROM members ORDER BY member_id"), raw(db_path, "SELECT * FROM fleets")
    one_line_error(cli("fleet", "delete", str(fleet_id)), f"member {m2} {PAUSED}")
    assert (raw(db_path, "SELECT * FROM members ORDER BY member_id"), raw(db_path, "SELECT * FROM fleets")) == before
    assert raw(db_path, "SELECT count(*) FROM member_placements") == [(3,)]


# --- unknown message state -----------------------------------------------------------------


@pytest.fixture
def archived(cli, build, db_path):
    """A fleet where member m1 has one pending message whose state another program set to
    'archived'; returns (m1, that message id)."""
    _fleet_id, director, (m1, _) = build.fleet()
    sent = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(m1), "x", "--json")
    message_id = sent.json()["message_id"]
    raw(db_path, "UPDATE messages SET status_state = 'archived' WHERE message_id = ?", (message_id,))
    return m1, message_id


def test_poll_refuses_an_unknown_message_state(cli, archived):
    member_id, message_id = archived
    one_line_error(cli("message", "poll", str(member_id)), f"message {message_id} {ARCHIVED}")
    one_line_error(cli("message", "wait", str(member_id), "--timeout", "0"), f"message {message_id} {ARCHIVED}")


def test_listen_refuses_an_unknown_message_state(run_cli, archived):
    """In a subprocess with a bound: a silent skip would leave `listen` waiting for ever."""
    member_id, message_id = archived
    one_line_error(run_cli("message", "listen", str(member_id), timeout=60), f"message {message_id} {ARCHIVED}")


def test_ack_refuses_an_unknown_message_state_and_leaves_the_row(cli, archived, db_path):
    _, message_id = archived
    one_line_error(cli("message", "ack", str(message_id)), f"message {message_id} {ARCHIVED}")
    assert raw(db_path, "SELECT status_state FROM messages WHERE message_id = ?", (message_id,)) == [("archived",)]


# --- a live fleet has an active Director with a placement ------------------------------------


def break_director(db_path: str, fleet_id: int, director: int, how: str) -> None:
    conn = sqlite3.connect(db_path)
    try:
        if how == "null reference":
            conn.execute("UPDATE fleets SET director_member_id = NULL WHERE fleet_id = ?", (fleet_id,))
        elif how == "deregistered":
            conn.execute(
                "UPDATE members SET status = 'deregistered', deregistered_at = ? WHERE member_id = ?",
                (clock.now(), director),
            )
        elif how == "no placement":
            conn.execute("DELETE FROM member_placements WHERE member_id = ?", (director,))
        conn.commit()
    finally:
        conn.close()


REASONS = {
    "null reference": "it has no Director",
    "deregistered": "its Director, member {director}, is deregistered",
    "no placement": "its Director, member {director}, has no placement",
}


@pytest.mark.parametrize("how", list(REASONS))
def test_a_fleet_without_a_live_director_refuses_sends_and_rosters(cli, build, db_path, how):
    fleet_id, director, (m1, m2) = build.fleet()
    break_director(db_path, fleet_id, director, how)
    reason = f"fleet {fleet_id} is not live: " + REASONS[how].format(director=director)
    one_line_error(cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "hi"), reason)
    one_line_error(cli("member", "list", str(fleet_id)), reason)
    one_line_error(cli("message", "broadcast", "--from-member-id", str(director), "hi"), reason)
    assert raw(db_path, "SELECT count(*) FROM messages") == [(0,)]
    # the fleet can still be looked at and deleted
    assert cli("fleet", "show", str(fleet_id)).code == 0
    deleted = cli("fleet", "delete", str(fleet_id))
    assert deleted.code == 0, deleted
    assert raw(db_path, "SELECT count(*) FROM members WHERE status = 'active'") == [(0,)]


# --- timestamps written by another program ---------------------------------------------------

FOREIGN_TIMESTAMPS = {
    # written as -> the same instant in cafleet's own form
    "2026-11-30 12:00:00": "2026-11-30T12:00:00.000000+00:00",
    "2026-11-30T12:00:00Z": "2026-11-30T12:00:00.000000+00:00",
    "2026-11-30T14:00:00+02:00": "2026-11-30T12:00:00.000000+00:00",
    "2026-11-30T07:00:00.5-05:00": "2026-11-30T12:00:00.500000+00:00",
    "2026-11-30T12:00:00.123456789+00:00": "2026-11-30T12:00:00.123456+00:00",
    "2026-11-30T12:00": "2026-11-30T12:00:00.000000+00:00",
    "2026-11-30t12:00:00z": "2026-11-30T12:00:00.000000+00:00",
}


@pytest.mark.parametrize("written", list(FOREIGN_TIMESTAMPS))
def test_foreign_timestamps_are_read_as_the_instant_they_name(written):
    assert clock.to_epoch(written) == clock.to_epoch(FOREIGN_TIMESTAMPS[written])


@pytest.mark.parametrize(
    "written",
    [
        "yesterday",
        "",
        "2026-13-01T00:00:00",
        "2026-11-30T25:00:00",
        "2026-11-30T12:00:00+99:00",
        "12:00:00",
        "2026-11-30T12:00:00 garbage",
        "2026-02-30T12:00:00",
    ],
)
def test_unreadable_timestamps_are_refused_clearly(written):
    from cafleet.errors import CorruptRow

    with pytest.raises(CorruptRow, match="timestamp"):
        clock.to_epoch(written)


def test_member_list_reads_foreign_timestamps_and_survives_unreadable_ones(cli, build, db_path):
    fleet_id, director, (m1, m2) = build.fleet()
    for to_id in (m1, m2):
        cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(to_id), "x")
    long_ago = "2020-01-01 00:00:00"
    raw(
        db_path,
        "UPDATE messages SET created_at = ?, status_timestamp = ? WHERE to_member_id = ?",
        ("2020-01-01T02:00:00+02:00", long_ago, m1),
    )
    raw(db_path, "UPDATE messages SET created_at = 'soon', status_timestamp = 'soon' WHERE to_member_id = ?", (m2,))
    result = cli("member", "list", str(fleet_id), "--json")
    assert result.code == 0, result
    by_id = {m["member_id"]: m for m in result.json()}
    expected_idle = clock.idle_seconds("2020-01-01T00:00:00.000000+00:00")
    assert expected_idle - 5 <= by_id[m1]["idle_seconds"] <= expected_idle + 60
    assert by_id[m1]["last_activity_at"] == long_ago  # shown as stored
    assert by_id[m2]["last_activity_at"] == "soon" and by_id[m2]["idle_seconds"] is None
    text = cli("member", "list", str(fleet_id))
    assert text.code == 0 and text.err == ""


# --- diagnosis --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index,columns",
    [
        ("idx_members_fleet_status", "members (fleet_id, status)"),
        ("idx_messages_to_member_status_ts", "messages (to_member_id, status_timestamp)"),
    ],
)
def test_diagnosis_refuses_a_required_index_made_unique(cli, build, store, db_path, index, columns):
    build.fleet(members_count=0)
    store.close()
    raw(db_path, f"DROP INDEX {index}")
    raw(db_path, f"CREATE UNIQUE INDEX {index} ON {columns}")
    from tests.conftest import file_digest

    digest = file_digest(db_path)
    result = cli("fleet", "list")
    one_line_error(result, f"index {index}")
    assert file_digest(db_path) == digest


def test_open_store_still_accepts_an_extra_unique_index(build, store, db_path):
    """An auxiliary UNIQUE index beside the required ones is compatible (the seed's rule)."""
    build.fleet(members_count=0)
    store.close()
    raw(db_path, "CREATE UNIQUE INDEX aux_fleet_names ON fleets (fleet_id, name)")
    open_store(db_path).close()
