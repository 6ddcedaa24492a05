"""Rosters are read once: `member list --state` and the WebUI's fleet view inspect each
member's pane from the one roster read, instead of reading every member again."""

from __future__ import annotations

import sys

import pytest

from cafleet.store import sqlite


@pytest.fixture
def readers(monkeypatch) -> list[str]:
    """The name of the function behind every statement sent through ``Store.execute``."""
    names: list[str] = []
    original = sqlite.SqliteStore.execute

    def execute(store, sql, params=()):
        names.append(sys._getframe(1).f_code.co_name)
        return original(store, sql, params)

    monkeypatch.setattr(sqlite.SqliteStore, "execute", execute)
    return names


@pytest.fixture
def crew(build):
    fleet_id, director, members = build.fleet(members_count=3)  # pending placements: no pane calls
    return fleet_id, director, members


def test_member_list_with_states_reads_the_roster_once(cli, crew, readers):
    fleet_id, director, members = crew
    listed = cli("member", "list", str(fleet_id), "--state", "--json")
    assert listed.code == 0, listed
    records = listed.json()
    assert [r["member_id"] for r in records] == [director, *members]
    assert [r["state"] for r in records] == ["director"] + ["pending"] * 3
    assert set(records[0]) == {
        "member_id",
        "name",
        "kind",
        "status",
        "backend",
        "coding_agent",
        "pane_id",
        "last_activity_at",
        "idle_seconds",
        "state",
        "state_detail",
    }
    assert readers.count("_roster_rows") == 1  # the one read of the roster (members.roster, roster_detail)
    assert "_row" not in readers  # no member read again one by one


def test_member_list_without_states_keeps_its_record(cli, crew):
    fleet_id, _, _ = crew
    plain = cli("member", "list", str(fleet_id), "--json").json()
    with_states = cli("member", "list", str(fleet_id), "--state", "--json").json()
    assert [{k: v for k, v in r.items() if k not in ("state", "state_detail")} for r in with_states] == plain


def test_webui_fleet_view_reads_the_roster_once(store, crew, readers):
    from cafleet.web import api

    fleet_id, director, members = crew
    view = api.fleet_view_with_states(store, fleet_id)
    assert [m["member_id"] for m in view["members"]] == [director, *members]
    assert [m["state"] for m in view["members"]] == ["director"] + ["pending"] * 3
    assert readers.count("_roster_rows") == 1  # the one read of the roster (members.roster, roster_detail)
    assert "_row" not in readers


def _brute_force_activity(rows: list[tuple], member_id: int) -> str | None:
    """The seed's definition read off every row: the newest of what the member sent
    (``created_at``), received (``created_at``) and ACKed (``status_timestamp``)."""
    times = [created for _, sender, _, created, _ in rows if sender == member_id]
    times += [max(created, status_at) for _, _, recipient, created, status_at in rows if recipient == member_id]
    return max(times, default=None)


@pytest.mark.parametrize("seed", range(8))
def test_the_rosters_activity_walk_matches_the_definition_for_every_member(build, store, readers, seed):
    """Members walked together (broker/activity.py): each one's result is its own, and the
    roster's activity costs statements by the longest walk, not by the number of members."""
    import random

    from cafleet.broker import members

    chance = random.Random(seed)
    fleet_id, director, crew = build.fleet(members_count=5)
    everyone = [director, *crew]
    stamp = lambda n: "2026-01-01T00:{:02d}:{:02d}.000000+00:00".format(*divmod(n, 60))
    rows = []
    with store.write():
        for _ in range(chance.randrange(0, 40)):
            sender, recipient = chance.sample(everyone, 2)
            created = chance.randrange(0, 3000)
            acked = chance.random() < 0.6
            status_at = created + chance.randrange(0, 600) if acked else created
            message_id = store.insert(
                "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, "
                "text) VALUES (?, ?, ?, ?, ?, 'x')",
                (sender, recipient, stamp(created), "completed" if acked else "input_required", stamp(status_at)),
                "message_id",
            )
            rows.append((message_id, sender, recipient, stamp(created), stamp(status_at)))
    readers.clear()
    roster = members.roster(store, fleet_id)
    assert {r["member_id"]: r["last_activity_at"] for r in roster} == {
        member_id: _brute_force_activity(rows, member_id) for member_id in everyone
    }
    walks = readers.count("_activity_walk")
    assert 1 <= walks <= 1 + max([sum(1 for row in rows if row[1] == m) for m in everyone], default=0)
    for member_id in everyone:  # one member alone walks to the same answer
        assert members.get_member(store, member_id)["last_activity_at"] == _brute_force_activity(rows, member_id)


def test_a_large_rosters_activity_costs_a_few_statements(build, store, readers):
    """Twenty members who each received a task, answered it and had the answer ACKed: every
    walk takes two steps, and the whole roster two statements (before: three per member)."""
    from cafleet.broker import members, messages

    fleet_id, director, crew = build.fleet(members_count=20)
    answered = {}
    for member_id in crew:
        messages.send(store, director, member_id, "task")
        answered[member_id] = messages.send(store, member_id, director, "done")["created_at"]
        messages.ack(store, answered_id := store.execute("SELECT max(message_id) FROM messages").fetchone()[0])
        assert answered_id
    readers.clear()
    roster = members.roster(store, fleet_id)
    assert {r["member_id"]: r["last_activity_at"] for r in roster if r["member_id"] in crew} == answered
    assert readers.count("_activity_walk") == 2
