"""Rosters are read once: `member list --state` and the WebUI's fleet view inspect each
member's pane from the one roster read, instead of reading every member again."""

from __future__ import annotations

import sys

import pytest

from cafleet.store import connection


@pytest.fixture
def readers(monkeypatch) -> list[str]:
    """The name of the function behind every statement sent through ``Store.execute``."""
    names: list[str] = []
    original = connection.Store.execute

    def execute(store, sql, params=()):
        names.append(sys._getframe(1).f_code.co_name)
        return original(store, sql, params)

    monkeypatch.setattr(connection.Store, "execute", execute)
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
    assert readers.count("roster") == 1
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
    assert readers.count("roster") == 1
    assert "_row" not in readers
