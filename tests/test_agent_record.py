"""An opencode member's own record of what it was sent (docs/delivery.md, step 1).

opencode draws in place, so a preview it took after cafleet's attempt stopped waiting for
the echo may be on no screen and in no history; its database records every message it
was sent. Seen in a CI run on the real opencode 1.18.33 (a send while it started): the
first attempt pressed Enter and gave up, opencode took the line, and the next send's retry
typed it again, two user messages with the same header in opencode.db. Here the member's
pane is a stand-in (so no attempt can type: an opencode box is never drawn) and its
opencode.db is written by the test as opencode writes it: a retry finds the header there,
stamps the message and types nothing. On SQLite the record is asked only after an Enter
was pressed for that preview (the pane's lock file says so); PostgreSQL keeps no record of
Enters, so there it is asked on every retry.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")

import json
import sqlite3
from pathlib import Path

import pytest

from tests.support.pane_fleet import preview_line, tmux_fleet


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


def opencode_member(fleet, data_dir, cwd: str) -> dict:
    """A member recorded as opencode (its pane a stand-in) with its usage source."""
    from cafleet.broker import members, usage
    from cafleet.store.engines import open_store

    member = fleet.attach("oc", coding_agent="opencode")
    store = open_store(str(fleet.db))
    try:
        usage.record_source(
            store, member["member_id"], coding_agent="opencode", session_id=None, data_dir=str(data_dir), cwd=cwd
        )
        placement = members.get_member(store, member["member_id"])["placement"]
    finally:
        store.close()
    return dict(member, placement=placement)


def write_opencode_db(data_dir, cwd: str, fleet_id: int, member_id: int, user_texts: list[str]) -> None:
    """opencode 1.18's tables as far as cafleet reads them: the member's session (its spawn
    prompt carries the identity lines) and one user message per text."""
    data_dir.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(data_dir / "opencode.db")
    conn.executescript(
        "CREATE TABLE IF NOT EXISTS session (id TEXT PRIMARY KEY, directory TEXT, agent TEXT, parent_id TEXT, "
        "time_created INTEGER);"
        "CREATE TABLE IF NOT EXISTS message (id TEXT PRIMARY KEY, session_id TEXT, data TEXT);"
        "CREATE TABLE IF NOT EXISTS part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, data TEXT);"
    )
    conn.execute("INSERT OR IGNORE INTO session VALUES ('ses', ?, 'cafleet', NULL, 4102444800000)", (cwd,))
    spawn = f"Wait for tasks.\ncafleet identity:\n- fleet id: {fleet_id}\n- your member id: {member_id}\n- more\n"
    texts = [spawn, *user_texts]
    for n, text in enumerate(texts):
        conn.execute(
            "INSERT OR REPLACE INTO message VALUES (?, 'ses', ?)",
            (f"msg{n}", json.dumps({"role": "user", "agent": "cafleet"})),
        )
        conn.execute(
            "INSERT OR REPLACE INTO part VALUES (?, ?, 'ses', ?)",
            (f"prt{n}", f"msg{n}", json.dumps({"type": "text", "text": text}, ensure_ascii=False)),
        )
    conn.commit()
    conn.close()


def note_enter(fleet, placement: dict, message_id: int) -> None:
    """What the attempt that pressed Enter left in the pane's lock file (SQLite)."""
    from cafleet.store.engines import lock_space

    path = Path(lock_space(fleet.db).pane_path(placement["backend"], placement["session"], placement["pane_id"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(message_id))


@pytest.fixture
def sent(fleet, tmp_path):
    """An opencode member owed one preview its pane never took: (member, data dir, cwd, record)."""
    data_dir, cwd = tmp_path / "opencode-data", str(tmp_path / "work")
    member = opencode_member(fleet, data_dir, cwd)
    first = fleet.send(fleet.director, member["member_id"], "Sent while you start.", "--json")
    assert first.code == 0, first
    record = first.json()
    assert record["notified"] is False  # no opencode box in that pane: nothing typed
    return member, data_dir, cwd, record


def retry(fleet, member: dict) -> None:
    second = fleet.send(fleet.director, member["member_id"], "Second message.", "--json")
    assert second.code == 0, second


def test_a_preview_opencode_recorded_is_stamped_on_retry_not_typed_again(fleet, store_kind, sent):
    member, data_dir, cwd, record = sent
    write_opencode_db(data_dir, cwd, fleet.fleet_id, member["member_id"], [preview_line(record)])
    if store_kind == "sqlite":
        note_enter(fleet, member["placement"], record["message_id"])
    retry(fleet, member)
    assert fleet.notified_at(record["message_id"]) is not None
    assert fleet.submits(member["member_id"]) == []  # nothing was typed into the pane


def test_a_header_only_quoted_by_another_message_does_not_count(fleet, store_kind, sent):
    member, data_dir, cwd, record = sent
    quoted = "As the Director said: " + preview_line(record)
    write_opencode_db(data_dir, cwd, fleet.fleet_id, member["member_id"], [quoted])
    if store_kind == "sqlite":
        note_enter(fleet, member["placement"], record["message_id"])
    retry(fleet, member)
    assert fleet.notified_at(record["message_id"]) is None  # still owed


@pytest.mark.stores("sqlite")  # PostgreSQL keeps no record of Enters: there the record is always asked
def test_without_an_earlier_enter_the_record_is_not_asked(fleet, sent):
    member, data_dir, cwd, record = sent
    write_opencode_db(data_dir, cwd, fleet.fleet_id, member["member_id"], [preview_line(record)])
    retry(fleet, member)
    assert fleet.notified_at(record["message_id"]) is None


def test_another_members_session_is_not_this_ones(fleet, store_kind, sent):
    member, data_dir, cwd, record = sent
    write_opencode_db(data_dir, cwd, fleet.fleet_id, member["member_id"] + 100, [preview_line(record)])
    if store_kind == "sqlite":
        note_enter(fleet, member["placement"], record["message_id"])
    retry(fleet, member)
    assert fleet.notified_at(record["message_id"]) is None


@pytest.mark.stores("sqlite")  # no database of cafleet's involved
def test_an_opencode_record_that_cannot_be_read_tells_nothing(tmp_path):
    """No file, a file that is no database, tables of another shape: False (the retry
    then types as before), never an error."""
    from cafleet.agents.previews import opencode_user_text_starts

    def asked(folder) -> bool:
        return opencode_user_text_starts(
            str(folder), cwd="/w", started_at="2026-01-01T00:00:00.000000+00:00", fleet_id=1, member_id=2, start="[x]"
        )

    assert asked(tmp_path / "none") is False
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "opencode.db").write_bytes(b"not a database at all" * 100)
    assert asked(garbage) is False
    other = tmp_path / "other"
    other.mkdir()
    conn = sqlite3.connect(other / "opencode.db")
    conn.execute("CREATE TABLE session (id TEXT)")
    conn.commit()
    conn.close()
    assert asked(other) is False
