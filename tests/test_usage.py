"""Usage and budgets without a real agent (docs/usage.md), on both stores: a database
without cafleet's usage tables works, the first write that needs one creates it, `cafleet
doctor` reports them missing and `cafleet setup` adds them, bad budget values are refused
before anything is written, and
usage records written where claude writes them are summed per member and gate the send.
The real agents' own records are in tests/test_usage_real.py."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import pytest

from cafleet.broker import spawns, usage
from cafleet.store import schema
from cafleet.store.engines import open_store
from tests.conftest import FleetBuilder
from tests.support.pane_fleet import tmux_fleet
from tests.support.usage_records import call_lines, write_calls


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


def drop_usage_tables(url: str) -> None:
    """The database as another implementation (or an older cafleet) made it."""
    store = open_store(url)
    try:
        with store.write():
            for name in schema.AUX_TABLES:
                store.execute(f"DROP TABLE IF EXISTS {name}")
    finally:
        store.close()


USAGE_TABLES = (usage.TABLE, usage.TOTALS_TABLE, usage.FLEET_TABLE)


def usage_tables(url: str) -> set[str]:
    store = open_store(url)
    try:
        return store.tables_present(schema.AUX_TABLES)
    finally:
        store.close()


def test_bad_budgets_are_refused_before_anything_is_written(fleet):
    before = members(fleet)
    for flag, value, allowed in (
        ("--budget-usd", "-1", "a number of dollars from 0.01 to 1000000000"),
        ("--budget-usd", "nan", "a number of dollars from 0.01 to 1000000000"),
        ("--budget-tokens", "1.5", "a number of tokens from 1 to 1000000000000000"),
        ("--budget-tokens", "0", "a number of tokens from 1 to 1000000000000000"),
    ):
        refused = create(fleet, "capped", flag, value)
        assert refused.code == 2 and refused.err == f"Error: {flag} must be {allowed}, got '{value}'.\n", refused
    assert members(fleet) == before
    both = fleet.cafleet("fleet", "budget", str(fleet.fleet_id), "--clear", "--tokens", "5")
    assert both.code == 2 and both.err.startswith("Error: --clear takes no --usd or --tokens"), both


def test_a_file_without_the_usage_tables_works_and_the_first_budget_creates_them(fleet, env):
    """Without the tables every read works (no attribution, no budget); `member create
    --budget-*` and `fleet budget` used to refuse with "run `cafleet setup` once" and now
    create the table they need, each in a transaction of its own, outside the ledger."""
    drop_usage_tables(fleet.db)
    assert usage_tables(fleet.db) == set()
    director = str(fleet.director)
    shown = fleet.cafleet("member", "usage", director)
    assert shown.code == 0 and shown.out.startswith(f"member {director} (Director, standin): no attribution recorded")
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id))
    assert listed.code == 0 and "SPEND/BUDGET" not in listed.out, listed
    budget = fleet.cafleet("fleet", "budget", str(fleet.fleet_id), "--json")
    assert budget.code == 0, budget
    cleared = fleet.cafleet("fleet", "budget", str(fleet.fleet_id), "--clear")
    assert cleared.code == 0, cleared
    assert usage_tables(fleet.db) == set()  # clearing a budget nobody set creates nothing

    capped = create(fleet, "capped", "--budget-tokens", "10")
    assert capped.code == 0, capped
    # the stored totals come with the sources; what the member was started with, with it
    assert usage_tables(fleet.db) == {usage.TABLE, usage.TOTALS_TABLE, spawns.TABLE}
    assert fleet.query("SELECT version FROM refinery_schema_history") == [(1,)]
    report = fleet.cafleet("member", "usage", str(capped.json()["member_id"]), "--json").json()
    assert report["budget"] == {"usd": None, "tokens": 10, "over": False}
    assert report["no_records"] == "usage of standin is not read yet"
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id))
    assert listed.code == 0 and "SPEND/BUDGET" in listed.out.splitlines()[0], listed
    row = next(line for line in listed.out.splitlines() if " capped " in line)
    assert row.endswith("0/10 tok"), listed.out
    plain = create(fleet, "plain")
    assert plain.code == 0, plain
    as_json = fleet.cafleet("member", "list", str(fleet.fleet_id), "--json").json()
    by_id = {r["member_id"]: r for r in as_json}
    assert by_id[capped.json()["member_id"]]["spend"] == {"usd": 0.0, "tokens": 0}
    assert "spend" not in by_id[plain.json()["member_id"]]  # no budget: the roster record is unchanged
    fleet_budget = fleet.cafleet("fleet", "budget", str(fleet.fleet_id), "--usd", "3")
    assert fleet_budget.code == 0, fleet_budget
    assert usage_tables(fleet.db) == {usage.TABLE, usage.TOTALS_TABLE, spawns.TABLE, usage.FLEET_TABLE}
    assert fleet.query("SELECT version FROM refinery_schema_history") == [(1,)]


def test_the_auxiliaries_are_created_where_first_needed(cli, build, store, db_path):
    """A new database has none of cafleet's auxiliary objects (its baseline is exactly the
    seed's tables); the first fleet adds the pending index, the first fleet budget its
    table, the first recorded usage source the usage table. `doctor` says ✓ throughout."""

    def auxiliaries() -> tuple[dict, dict]:
        report = cli("doctor", "--json").json()["database"]
        assert report["ok"] is True, report
        tables = {name: p for name, p in report["auxiliary_tables"].items() if name in USAGE_TABLES}
        indexes = {name: p for name, p in report["auxiliary_indexes"].items() if "_execs_" not in name}  # with execs
        return indexes, tables

    pending = next(iter(schema.AUX_INDEXES))
    assert auxiliaries() == ({pending: "missing"}, {name: "missing" for name in USAGE_TABLES})
    fleet_id, _director, (m1, _) = build.fleet()
    assert auxiliaries() == ({}, {name: "missing" for name in USAGE_TABLES})
    assert cli("fleet", "budget", str(fleet_id), "--tokens", "5").code == 0
    assert auxiliaries() == ({}, {usage.TABLE: "missing"})
    usage.record_source(store, m1, coding_agent="claude", session_id=None, data_dir=None, cwd="/", budget_usd=2.0)
    assert auxiliaries() == ({}, {})
    assert usage.budgets_for_send(store, m1) == {"member": (2.0, None), "fleet": (fleet_id, None, 5)}
    assert store.execute("SELECT version FROM refinery_schema_history").fetchall() == [(1,)]


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
    from tests.support.web_server import BASE, make_app, web_client

    with web_client(make_app(db_path, env)) as client:
        refused = client.post(
            "/api/messages",
            json={"from_member_id": director, "to_member_id": m1, "text": "more work"},
            headers={"Origin": BASE},
        )
    assert refused.status_code == 409 and "over its budget" in refused.json()["error"]
    assert store.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    forced = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(m1), "--force", "go")
    assert forced.code == 0, forced
    assert store.execute("SELECT count(*) FROM messages").fetchone()[0] == 1


# --- cafleet doctor and the usage tables ------------------------------------------------------


def test_doctor_reports_missing_usage_tables_and_setup_adds_them(cli, env, db_path):
    """The tables are optional: a database without them is accepted (commands work), and
    `cafleet doctor` says so, with what creates them, until they exist; `cafleet setup`
    adds every missing auxiliary object at once."""
    assert cli("fleet", "list").code == 0  # initialises the database: exactly the seed's tables
    report = cli("doctor", "--json").json()["database"]
    assert report["ok"] is True
    assert report["auxiliary_tables"] == {name: "missing" for name in schema.AUX_TABLES}
    # an index over an auxiliary table comes with its table: only the one over messages is reported
    assert report["auxiliary_indexes"] == {
        i.name: "missing" for i in schema.DECLARED_AUX_INDEXES if i.table not in schema.AUX_TABLES
    }
    assert "the first command that needs it creates it" in report["advice"] and "cafleet setup" in report["advice"]
    text = cli("doctor").out.splitlines()
    for name in schema.AUX_TABLES:
        assert (
            f"    ! table {name} is missing: not created yet, commands work without it; the first command "
            "that needs it creates it (docs/storage.md says which), or run `cafleet setup` to add it now"
        ) in text
    setup = cli("setup", "--coding-agent", "claude", "--json")
    assert setup.code == 0, setup
    assert setup.json()["database"]["tables_added"] == list(schema.AUX_TABLES)
    assert setup.json()["database"]["indexes_added"] == list(schema.AUX_INDEXES)
    healthy = cli("doctor", "--json").json()["database"]
    assert (healthy["ok"], healthy["auxiliary_tables"], healthy["auxiliary_indexes"]) == (True, {}, {})
    assert "advice" not in healthy
    again = cli("setup", "--coding-agent", "claude", "--json").json()["database"]
    assert again["tables_added"] == [] and again["indexes_added"] == []
    drop_usage_tables(db_path)
    assert cli("fleet", "list").code == 0  # diagnosis still accepts it
    assert cli("doctor", "--json").json()["database"]["auxiliary_tables"] == {
        name: "missing" for name in schema.AUX_TABLES
    }


def test_doctor_reports_a_usage_table_with_other_columns_and_setup_leaves_it(cli, env, db_path):
    assert cli("fleet", "list").code == 0
    store = open_store(db_path)
    try:
        with store.write():
            store.execute(f"DROP TABLE IF EXISTS {usage.FLEET_TABLE}")
            store.execute(f"CREATE TABLE {usage.FLEET_TABLE} (fleet_id INTEGER NOT NULL PRIMARY KEY, cap TEXT)")
            store.execute(f"INSERT INTO {usage.FLEET_TABLE} (fleet_id, cap) VALUES (1, 'mine')")
    finally:
        store.close()
    report = cli("doctor", "--json").json()["database"]
    assert report["ok"] is True and {k: v for k, v in report["auxiliary_tables"].items() if k in USAGE_TABLES} == {
        usage.FLEET_TABLE: "altered",
        usage.TABLE: "missing",
        usage.TOTALS_TABLE: "missing",
    }
    assert "has other columns" in report["advice"] and "rename it and run `cafleet setup`" in report["advice"]
    assert (
        usage.FLEET_TABLE not in cli("setup", "--coding-agent", "claude", "--json").json()["database"]["tables_added"]
    )
    cli_store = open_store(db_path)
    try:
        fleet_id = FleetBuilder(cli_store).fleet()[0]
    finally:
        cli_store.close()
    refused = cli("fleet", "budget", str(fleet_id), "--usd", "3")  # never written into someone else's table
    assert refused.code == 1 and refused.err.startswith("Error: ") and refused.err.count("\n") == 1, refused
    store = open_store(db_path)
    try:
        assert store.execute(f"SELECT fleet_id, cap FROM {usage.FLEET_TABLE}").fetchall() == [(1, "mine")]
    finally:
        store.close()


# --- spend read from claude's records, per member, on both stores --------------------------------


def test_recorded_spend_is_summed_per_member_and_gates_the_send(cli, build, store, db_path, env, tmp_path):
    """Two claude members in one directory, each tied to its own session at spawn (the
    attribution row, as `member create` writes it): each one's calls are summed exactly,
    the fleet's is their sum, a session added later (/clear) counts, the WebUI serves the
    same figures, and a member over its budget is refused new work unless --force."""
    config = tmp_path / "claude-config"
    fleet_id, director, (alice, bob) = build.fleet("spend", 2)
    usage.record_source(
        store, alice, coding_agent="claude", session_id="s-alice", data_dir=str(config), cwd="/work", budget_tokens=5000
    )
    usage.record_source(store, bob, coding_agent="claude", session_id="s-bob", data_dir=str(config), cwd="/work")
    write_calls(config, "s-alice", call_lines("m1", 1001, 11, blocks=2) + call_lines("m2", 2002, 22))
    write_calls(config, "s-bob", call_lines("m3", 3003, 33))

    def tokens(member_id: int) -> tuple:
        report = cli("member", "usage", str(member_id), "--json").json()
        return report["calls"], report["tokens"]["total"], report["budget"]

    assert tokens(alice) == (2, 3036, {"usd": None, "tokens": 5000, "over": False})
    assert tokens(bob) == (1, 3036, None)
    # a session the member started later (/clear) is remembered once and counted
    usage.add_session(store, alice, "s-alice-2")
    usage.add_session(store, alice, "s-alice-2")
    assert usage.sources(store, [alice])[alice]["session_id"] == "s-alice s-alice-2"
    write_calls(config, "s-alice-2", call_lines("m4", 1500, 50))
    assert tokens(alice) == (3, 4586, {"usd": None, "tokens": 5000, "over": False})

    whole = cli("fleet", "usage", str(fleet_id), "--json").json()
    assert (whole["calls"], whole["tokens"]["total"]) == (4, 4586 + 3036)
    listed = cli("member", "list", str(fleet_id))
    assert any(line.startswith(f"{alice} ") and line.endswith("4586/5000 tok") for line in listed.out.splitlines())
    from tests.support.web_server import make_app, web_client

    with web_client(make_app(db_path, env)) as client:
        served = client.get(f"/api/fleets/{fleet_id}/usage").json()
    assert served["tokens"] == whole["tokens"]
    assert {r["member_id"]: r["tokens"]["total"] for r in served["members"]} == {director: 0, alice: 4586, bob: 3036}

    sent = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(alice), "under", "--json")
    assert sent.code == 0, sent
    write_calls(config, "s-alice-2", call_lines("m5", 400, 14))  # 5000 reached
    # the gate reads the stored totals (docs/usage.md): the keeper stores the new total
    # within seconds; here no keeper runs, so the explicit command reads it
    assert tokens(alice)[1] == 5000
    count = store.execute("SELECT count(*) FROM messages").fetchone()[0]
    refused = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(alice), "over")
    assert (refused.code, refused.out, refused.err) == (
        1,
        "",
        f"Error: member {alice} is over its budget (5000 tokens spent of a 5000-token budget); "
        "it gets no new work; give --force to send anyway.\n",
    )
    assert store.execute("SELECT count(*) FROM messages").fetchone()[0] == count
    own = cli("message", "send", "--from-member-id", str(alice), "--to-member-id", str(director), "report")
    assert own.code == 0, own
    to_bob = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(bob), "fine")
    assert to_bob.code == 0, to_bob
    forced = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(alice), "--force", "go")
    assert forced.code == 0, forced
    assert store.execute("SELECT count(*) FROM messages").fetchone()[0] == count + 3


def test_fleet_budget_options_keep_what_they_do_not_name(cli, build, store):
    """`fleet budget --usd` leaves the token budget as it was and `--tokens` the dollars
    (the options' documented default: unchanged); `--clear` removes both."""
    fleet_id, _, _ = build.fleet("budgeted", 1)

    def budget(*options: str):
        done = cli("fleet", "budget", str(fleet_id), *options, "--json")
        assert done.code == 0, done
        return done.json()["budget"]

    assert budget() is None
    assert budget("--usd", "2.5") == {"usd": 2.5, "tokens": None, "over": False}
    assert budget("--tokens", "7000") == {"usd": 2.5, "tokens": 7000, "over": False}
    assert budget("--usd", "0.75") == {"usd": 0.75, "tokens": 7000, "over": False}
    assert budget("--clear") is None
    assert store.execute(f"SELECT count(*) FROM {usage.FLEET_TABLE}").fetchone()[0] == 0
