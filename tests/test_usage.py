"""Usage and budgets without a real agent (docs/usage.md): a file without cafleet's usage
tables works and says so, `cafleet setup` adds them, and bad budget values are refused
before anything is written. The real agents' numbers are in tests/test_usage_real.py."""

from __future__ import annotations

import sqlite3

import pytest

from cafleet.store import schema
from tests.support.pane_fleet import tmux_fleet


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


def create(fleet, name: str, *extra: str):
    return fleet.cafleet(
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        name,
        "--description",
        f"{name} worker",
        "--coding-agent",
        "standin",
        *extra,
        "--json",
        "Hi",
    )


def members(fleet) -> int:
    return fleet.query("SELECT count(*) FROM members")[0][0]


def test_bad_budgets_are_refused_before_anything_is_written(fleet):
    before = members(fleet)
    for flag, value, said in (
        ("--budget-usd", "-1", "a positive number of dollars"),
        ("--budget-usd", "nan", "a positive number of dollars"),
        ("--budget-tokens", "1.5", "a positive whole number of tokens"),
        ("--budget-tokens", "0", "a positive whole number of tokens"),
    ):
        refused = create(fleet, "capped", flag, value)
        assert refused.code == 2 and refused.err == f"Error: invalid {flag} {value}; give {said}" + (
            ", like 2.50\n" if flag == "--budget-usd" else "\n"
        ), refused
    assert members(fleet) == before
    both = fleet.cafleet("fleet", "budget", str(fleet.fleet_id), "--clear", "--tokens", "5")
    assert both.code == 2 and both.err.startswith("Error: --clear takes no --usd or --tokens"), both


def test_a_file_without_the_usage_tables_works_and_setup_adds_them(fleet, env):
    conn = sqlite3.connect(fleet.db)
    for name in schema.AUX_TABLES:
        conn.execute(f"DROP TABLE {name}")
    conn.commit()
    conn.close()
    worker = create(fleet, "plain")
    assert worker.code == 0, worker
    worker_id = worker.json()["member_id"]
    shown = fleet.cafleet("member", "usage", str(worker_id))
    assert shown.code == 0 and shown.out.startswith(f"member {worker_id} (plain, standin): no attribution recorded")
    sent = fleet.cafleet(
        "message", "send", "--from-member-id", str(fleet.director), "--to-member-id", str(worker_id), "hi"
    )
    assert sent.code == 0, sent
    before = members(fleet)
    capped = create(fleet, "capped", "--budget-tokens", "10")
    assert (capped.code, capped.err) == (
        1,
        "Error: this database has no budget table yet; run `cafleet setup` once, then retry.\n",
    ), capped
    assert members(fleet) == before
    refused = fleet.cafleet("fleet", "budget", str(fleet.fleet_id), "--usd", "3")
    assert refused.code == 1 and "run `cafleet setup`" in refused.err

    setup = fleet.cafleet("setup", "--coding-agent", "claude", "--json")
    assert setup.code == 0, setup
    assert (
        sorted(setup.json()["database"]["tables_added"])
        == sorted(schema.AUX_TABLES)
        == sorted(
            name
            for (name,) in fleet.query(
                "SELECT name FROM sqlite_master WHERE name LIKE 'cafleet_aux_%' AND type = 'table'"
            )
        )
    )
    assert fleet.query("SELECT version FROM refinery_schema_history") == [(1,)]
    capped = create(fleet, "capped", "--budget-tokens", "10")
    assert capped.code == 0, capped
    report = fleet.cafleet("member", "usage", str(capped.json()["member_id"]), "--json").json()
    assert report["budget"] == {"usd": None, "tokens": 10, "over": False}
    assert report["no_records"] == "usage of standin is not read yet"
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id))
    assert listed.code == 0 and "SPEND/BUDGET" in listed.out.splitlines()[0], listed
    row = next(line for line in listed.out.splitlines() if " capped " in line)
    assert row.endswith("0/10 tok"), listed.out
    as_json = fleet.cafleet("member", "list", str(fleet.fleet_id), "--json").json()
    by_id = {r["member_id"]: r for r in as_json}
    assert by_id[capped.json()["member_id"]]["spend"] == {"usd": 0.0, "tokens": 0}
    assert "spend" not in by_id[worker_id]  # no budget: the roster record is unchanged


def test_a_fleet_over_its_budget_gets_no_work_from_a_broadcast_or_the_webui(cli, build, store, db_path, env):
    """The budget gate is on the one send path: a broadcast leaves every capped member out
    (reporting each), the WebUI refuses like the command line, and --force still sends."""
    fleet_id, director, (m1, m2) = build.fleet("capped", 2)
    assert cli("fleet", "budget", str(fleet_id), "--tokens", "1").code == 0
    # stand-ins spend nothing: a cap of 0 (only writable by hand) is one they are at, so over
    store.execute("UPDATE cafleet_aux_fleet_budgets SET budget_tokens = 0 WHERE fleet_id = ?", (fleet_id,))
    broadcast = cli("message", "broadcast", "--from-member-id", str(director), "start", "--json")
    assert broadcast.code == 1
    assert broadcast.json()["sent"] == []
    assert [f["to_member_id"] for f in broadcast.json()["failed"]] == [m1, m2]
    assert all("over its budget" in f["error"] for f in broadcast.json()["failed"])
    from tests.support.web_server import BASE, make_app

    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        from starlette.testclient import TestClient
    with TestClient(make_app(db_path, env), base_url=BASE) as client:
        refused = client.post(
            "/api/messages",
            json={"from_member_id": director, "to_member_id": m1, "text": "more work"},
            headers={"Origin": BASE},
        )
    assert refused.status_code >= 400 and "over its budget" in refused.json()["error"]
    assert store.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    forced = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(m1), "--force", "go")
    assert forced.code == 0, forced
    assert store.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
