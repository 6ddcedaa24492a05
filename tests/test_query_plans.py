"""Every query the hot commands run reaches ``messages`` and ``members`` through an index
or the primary key, never a full-table scan, on the baseline schema as it is.

The SQL is not copied here: each scenario runs the real command (in-process CLI, or the
real delivery/broker function for the long-running streams and the WebUI) while
``Store.execute`` is recorded, and each recorded statement is then explained with its
own parameters. Two databases of the same realistic shape (old deleted fleets plus one
busy live fleet) are checked: one as cafleet leaves it, without statistics, and one after
``ANALYZE`` (a user or a tool may run it), where SQLite weighs real statistics and is
tempted to walk a whole table, e.g. backwards by id in the hope of meeting a LIMIT soon.
"""

from __future__ import annotations

import os
import sqlite3
import sys

import pytest

from cafleet.broker import fleets, members, messages, notifications, timeline
from cafleet.config import Settings
from cafleet.delivery import inbox
from cafleet.delivery.supervision.watch import Watcher
from cafleet.store import schema, sqlite
from cafleet.store.engines import open_store

SESSION = "$0@/nonexistent/cafleet-plans-socket"  # panes that do not exist: delivery fails fast
OLD_FLEETS, OLD_MESSAGES_EACH, HOT_MESSAGES = 30, 1000, 3000

# The names the queries give their tables.
TABLES = {
    "messages": "messages",
    "msg": "messages",
    "received": "messages",
    "members": "members",
    "m": "members",
    "d": "members",  # a fleet's Director, joined in (broker/fleets.py DIRECTOR_JOINS)
    "dp": "member_placements",
    "fleets": "fleets",
    "f": "fleets",
    "member_placements": "member_placements",
    "p": "member_placements",
    "sqlite_master": "sqlite_master",
    "cafleet_aux_member_usage_sources": "cafleet_aux_member_usage_sources",
    "b": "cafleet_aux_fleet_budgets",
    "a": "an auxiliary table read by member (broker/records.py rows_in_fleet)",
    "s": "cafleet_aux_member_usage_sources",
    "cafleet_aux_fleet_budgets": "cafleet_aux_fleet_budgets",
    "t": "cafleet_aux_member_usage_totals",
    "cafleet_aux_member_usage_totals": "cafleet_aux_member_usage_totals",
    "w": "cafleet_aux_member_worktrees",
    "cafleet_aux_member_worktrees": "cafleet_aux_member_worktrees",
    "cafleet_aux_fleet_worktrees": "cafleet_aux_fleet_worktrees",
    "sp": "cafleet_aux_member_spawns",
    "cafleet_aux_member_spawns": "cafleet_aux_member_spawns",
    "cafleet_aux_execs": "cafleet_aux_execs",
    "cafleet_aux_fleet_revive": "cafleet_aux_fleet_revive",
    "cafleet_aux_fleet_placement": "cafleet_aux_fleet_placement",
    "cafleet_aux_revivals": "cafleet_aux_revivals",
    "cafleet_aux_fleet_notify": "cafleet_aux_fleet_notify",
    "cafleet_aux_notice_posts": "cafleet_aux_notice_posts",
    "cafleet_aux_notices": "cafleet_aux_notices",
    "n": "cafleet_aux_notices",
    "walk": "the activity walk's list of steps (broker/activity.py), constant rows",
    "CONSTANT": "a constant row of that list",
}
# Where a plan may read something other than one row or one index slice by equality:
ALLOWED = {
    # `fleet list` shows every live fleet: fleets has no index on deleted_at (the schema is
    # fixed) and holds one row per fleet ever created, a table tiny next to messages.
    ("list_fleets", "SCAN f"),
    # The WebUI stream's cursor: messages committed after the newest id it has seen, a
    # range at the end of the primary key.
    ("fleet_messages_after", "SEARCH msg USING INTEGER PRIMARY KEY (rowid>?)"),
    # A send asks whether the budget tables exist: the schema's own few rows.
    ("budgets_for_send", "SCAN sqlite_master"),
    ("has_table", "SCAN sqlite_master"),
    ("tables_present", "SCAN sqlite_master"),  # the schema's own catalogue: a few rows
    # The roster's activity walk: the members still walking and where each stands, given
    # as constant rows; each member's next step is an index seek (SEARCH messages ...).
    ("_activity_walk", "SCAN CONSTANT ROW"),
    ("_activity_walk", "SCAN walk"),
    # Who runs a command (delivery/authority.py): every placement, in every fleet. A
    # deregistered member's placement is deleted with it, so this is the members present now.
    ("placed_members", "SCAN p"),
}


def ts(seconds: int) -> str:
    day, hour, minute, second = 1 + seconds // 86400, seconds // 3600 % 24, seconds // 60 % 60, seconds % 60
    return f"2025-01-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.000000+00:00"


def build_database(path: str, analyze: bool, auxiliary: bool = True) -> dict:
    """Old fleets of ten (deleted), then a busy fleet: a Director, five members in (absent)
    panes and one still pending, with ACKed history, a pending message for the Director
    and one preview owed to a member."""
    store = open_store(path)
    rows = []
    for f in range(OLD_FLEETS):
        fleet = fleets.create_fleet(
            store, name=f"old{f}", coding_agent="claude", backend="tmux", session=SESSION, window_id="@0", pane_id="%0"
        )
        crew = [fleet["director_member_id"]] + [
            members.register_member(
                store,
                fleet_id=fleet["fleet_id"],
                name=f"o{i}",
                description="old",
                backend="tmux",
                session=SESSION,
                window_id="@0",
                coding_agent="claude",
                pane_id=f"%{i + 1}",
            )
            for i in range(9)
        ]
        for n in range(OLD_MESSAGES_EACH):
            t = f * OLD_MESSAGES_EACH + n
            rows.append((crew[n % 10], crew[(n + 1) % 10], ts(t), ts(t + 30), f"old {t}", ts(t + 1)))
        fleets.delete_fleet(store, fleet["fleet_id"])
    hot = fleets.create_fleet(
        store, name="hot", coding_agent="claude", backend="tmux", session=SESSION, window_id="@0", pane_id="%0"
    )
    fleet_id, director = hot["fleet_id"], hot["director_member_id"]
    crew = [
        members.register_member(
            store,
            fleet_id=fleet_id,
            name=f"w{i}",
            description="busy",
            backend="tmux",
            session=SESSION,
            window_id="@0",
            coding_agent="claude",
            pane_id=f"%{i + 1}",
        )
        for i in range(5)
    ]
    pending_member = members.register_member(
        store,
        fleet_id=fleet_id,
        name="new",
        description="being created",
        backend="tmux",
        session=SESSION,
        window_id="@0",
        coding_agent="claude",
    )
    base = OLD_FLEETS * OLD_MESSAGES_EACH
    for n in range(HOT_MESSAGES):
        worker = crew[n % len(crew)]
        sender, recipient = (director, worker) if n % 2 == 0 else (worker, director)
        rows.append(
            (
                sender,
                recipient,
                ts(base + n),
                ts(base + n + 30),
                f"hot {n}",
                None if recipient == director else ts(base + n + 1),
            )
        )
    with store.write():
        store.conn.executemany(
            "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text,"
            " notified_at) VALUES (?, ?, ?, 'completed', ?, ?, ?)",
            rows,
        )
    for_director = messages.send(store, crew[0], director, "done, please review")["message_id"]
    owed = messages.send(store, director, crew[1], "next task")["message_id"]  # no preview typed: owed
    to_ack = [messages.send(store, director, pending_member, f"ack me {i}")["message_id"] for i in range(4)]
    if auxiliary:  # every auxiliary object, as `cafleet setup` leaves the file
        schema.add_auxiliary_indexes(store)
    else:  # a file made by another implementation, or an older cafleet, without them
        for name in schema.AUX_INDEXES:
            store.execute(f"DROP INDEX IF EXISTS {name}")
        for name in schema.AUX_TABLES:
            store.execute(f"DROP TABLE IF EXISTS {name}")
    if analyze:
        store.execute("ANALYZE")
    store.close()
    return {
        "fleet": fleet_id,
        "old_fleet": 1,
        "director": director,
        "crew": crew,
        "pending_member": pending_member,
        "for_director": for_director,
        "owed": owed,
        "to_ack": to_ack,
    }


@pytest.fixture(scope="module", params=["fresh", "analyzed", "without-auxiliary"])
def database(request, tmp_path_factory) -> tuple[str, dict]:
    path = str(tmp_path_factory.mktemp(request.param) / "cafleet.db")
    ids = build_database(path, analyze=request.param == "analyzed", auxiliary=request.param != "without-auxiliary")
    conn = sqlite3.connect(path)
    has_stats = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone()[0]
    conn.close()
    assert has_stats == (request.param == "analyzed")
    return path, ids


class Recorder:
    """Every statement a broker function sends through ``Store.execute``, with its
    parameters and the name of that function."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, str, tuple]] = []

    def install(self, monkeypatch) -> None:
        original = sqlite.SqliteStore.execute
        recorder = self

        def execute(store, sql, params=()):
            frame = sys._getframe(1)
            if frame.f_code.co_name == "insert":  # Store.insert: the broker function is one further up
                frame = frame.f_back
            caller = frame.f_code.co_name
            recorder.statements.append((caller, sql, tuple(params)))
            return original(store, sql, params)

        monkeypatch.setattr(sqlite.SqliteStore, "execute", execute)


@pytest.fixture
def recorded(monkeypatch):
    recorder = Recorder()
    recorder.install(monkeypatch)
    return recorder


def plan_problems(path: str, statements) -> list[str]:
    """Plan lines that read messages, members or placements other than by equality on the
    primary key or on an index's leading column(s), unless listed in ALLOWED."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    problems = []
    try:
        for caller, sql, params in statements:
            if sql.split(None, 1)[0].upper() not in ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH"):
                continue
            for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params):
                detail = row[3]
                words = detail.split()
                if words[0] not in ("SCAN", "SEARCH"):
                    continue  # subquery headers, temp b-trees, bloom filters
                table = TABLES.get(words[1])
                assert table is not None, f"unknown table name in plan of {caller}: {detail}"
                by_equality = words[0] == "SEARCH" and (
                    "INTEGER PRIMARY KEY (rowid=?)" in detail or ("INDEX" in detail and "=?" in detail)
                )
                if not by_equality and (caller, detail) not in ALLOWED:
                    problems.append(f"{caller}: {detail}\n    {sql}")
    finally:
        conn.close()
    return problems


# The reads of a member's pending messages: with the auxiliary index present they must
# read it (only what is pending), not the recipient index (everything ever received).
PENDING_READERS = {
    "poll",
    "standing_and_inbox",
    "pending_after",
    "next_pending_notification",
    "recipients_owed_notifications",
    "fleet_open_messages",
}
PENDING_INDEX = "idx_cafleet_aux_messages_pending"


def pending_reads_off_the_index(path: str, statements) -> list[str]:
    """Pending-message reads whose plan does not use the auxiliary index (when the file has it)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    problems = []
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (PENDING_INDEX,)).fetchone():
            return []
        for caller, sql, params in statements:
            if caller not in PENDING_READERS or "status_state != 'completed'" not in sql:
                continue
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
            if not any(PENDING_INDEX in detail for detail in plan):
                problems.append(f"{caller}: {plan}\n    {sql}")
    finally:
        conn.close()
    return problems


def callers(recorder) -> set[str]:
    return {caller for caller, _, _ in recorder.statements}


def env_for(env: dict, path: str) -> dict:
    return dict(env, CAFLEET_DATABASE_URL=path, CAFLEET_LOCK_TIMEOUT="1", CAFLEET_SUBMIT_SETTLE="0")


class _First(Exception):
    pass


def listen_until_first_line(store, member_id: int) -> dict:
    """`message listen`'s own loop, stopped at its first line (it would run forever)."""
    lines = []

    def emit(record):
        lines.append(record)
        raise _First()

    with pytest.raises(_First):
        inbox.listen(store, member_id, emit, 0.01)
    return lines[0]


def test_schema_is_exactly_the_baseline(database):
    """The plans below rely on the seed's three indexes plus cafleet's auxiliary pending
    index (absent from a file made before it existed, where they must still hold)."""
    path, _ = database
    conn = sqlite3.connect(path)
    found = {
        (name, sql)
        for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'index') AND sql IS NOT NULL "
            "AND name NOT IN ('sqlite_sequence', 'sqlite_stat1')"
        )
    }
    conn.close()
    aux = (
        set()
        if path.split(os.sep)[-2].startswith("without-auxiliary")
        else {*schema.AUX_INDEXES.items(), *schema.AUX_TABLES.items()}
    )
    assert found == {*schema.TABLES.items(), *schema.INDEXES.items(), *aux}


def test_message_commands_use_indexes(cli, env, database, recorded):
    path, ids = database
    environ = env_for(env, path)
    director, (w1, w2, *_) = ids["director"], ids["crew"]
    polled = cli("message", "poll", str(director), "--json", environ=environ).json()
    assert polled[0]["message_id"] == ids["for_director"]
    # an empty inbox looks the member up (a poll with messages does not need to)
    assert cli("message", "poll", "999999", environ=environ).code == 1
    waited = cli("message", "wait", str(director), "--timeout", "0", "--json", environ=environ)
    assert waited.code == 0 and waited.json()[0]["message_id"] == ids["for_director"]
    # wait's retry pass tried the owed preview (the pane does not exist) and said so
    assert f"member {w2} was not notified" in waited.err
    assert cli("message", "show", str(ids["for_director"]), environ=environ).code == 0
    assert cli("message", "ack", str(ids["to_ack"].pop()), environ=environ).code == 0
    sent = cli(
        "message", "send", "--from-member-id", str(w1), "--to-member-id", str(director), "status?", environ=environ
    )
    assert sent.code == 0
    sent = cli(
        "message", "send", "--from-member-id", str(director), "--to-member-id", str(w1), "go on", environ=environ
    )
    assert sent.code == 0 and "was not notified" in sent.err  # the drain ran for a paned member
    store = open_store(path)
    try:
        assert listen_until_first_line(store, director)["message_id"] == ids["for_director"]
        notifications.stamp_notified(store, ids["owed"])
    finally:
        store.close()
    assert {
        "require_member",
        "poll",
        "member_with_fleet",  # member_standing's read (broker/records.py)
        "standing_and_inbox",  # message wait's read: the member's standing and its inbox at once
        "recipients_owed_notifications",
        "notification_target",
        "next_pending_notification",
        "still_pending_notification",
        "show",
        "ack",
        "_sender_and_recipient",
        "send",
        "pending_after",
        "stamp_notified",
    } <= callers(recorded)
    assert plan_problems(path, recorded.statements) == []
    assert pending_reads_off_the_index(path, recorded.statements) == []


def test_member_and_fleet_commands_use_indexes(cli, env, database, recorded):
    path, ids = database
    environ = env_for(env, path)
    listed = cli("member", "list", str(ids["fleet"]), "--json", environ=environ).json()
    assert [m["member_id"] for m in listed] == [ids["director"], *ids["crew"], ids["pending_member"]]
    assert cli("member", "show", str(ids["crew"][0]), environ=environ).code == 0
    assert [f["fleet_id"] for f in cli("fleet", "list", "--json", environ=environ).json()] == [ids["fleet"]]
    assert cli("fleet", "show", str(ids["old_fleet"]), environ=environ).code == 0
    assert {"_roster_rows", "get_fleet", "_activity_walk", "_row", "list_fleets"} <= callers(recorded)
    walked_on = [sql for caller, sql, _ in recorded.statements if caller == "_activity_walk" and "UNION ALL" in sql]
    assert walked_on, "the roster's walk took a step past the first for several members at once"
    assert plan_problems(path, recorded.statements) == []


def test_watch_and_webui_reads_use_indexes(env, database, recorded):
    path, ids = database
    store = open_store(path)
    try:
        events = []
        watcher = Watcher(store, Settings(env_for(env, path), path), ids["fleet"], 0.0, 600.0, events.append)
        watcher.director_messages()  # new messages for the Director (pending_after)
        watcher.members_round()  # roster, member details, activity (panes cannot be inspected)
        watcher.retry_stale()  # previews owed for longer than the interval (stale_notifications)
        assert {e["event"] for e in events} >= {"message", "dead"}
        page = timeline.fleet_timeline(store, ids["fleet"], limit=20)
        older = timeline.fleet_timeline(store, ids["fleet"], limit=20, before_id=page[-1]["message_id"])
        assert older[0]["message_id"] < page[-1]["message_id"]
        assert timeline.fleet_timeline(store, ids["old_fleet"], limit=1)[0]["text"].startswith("old ")
        newest = page[0]["message_id"]
        assert timeline.fleet_messages_after(store, ids["fleet"], newest) == []
        assert timeline.fleet_message(store, ids["fleet"], newest)["message_id"] == newest
        assert timeline.fleet_open_messages(store, ids["fleet"])
    finally:
        store.close()
    assert {
        "pending_after",
        "stale_notifications",
        "_roster_rows",
        "_activity_walk",
        "fleet_timeline",
        "fleet_messages_after",
        "fleet_message",
        "fleet_open_messages",
    } <= callers(recorded)
    assert plan_problems(path, recorded.statements) == []
    assert pending_reads_off_the_index(path, recorded.statements) == []


def test_the_keepers_look_for_sessions_to_keep_uses_indexes(database, recorded):
    """The keeper asks every few seconds which codex or opencode members have no session
    kept yet (what `fleet restore` resumes): by the fleet's index, never a walk of members."""
    from cafleet.broker import spawns
    from cafleet.delivery.spawning import restore

    path, ids = database
    store = open_store(path)
    try:
        for member_id in ids["crew"][:2]:
            spawns.record(store, member_id, model=None, effort=None, prompt="p", cwd="/", session_id=None)
        recorded.statements.clear()
        restore.pin_sessions(store, ids["fleet"])
    finally:
        store.close()
    assert "unpinned" in callers(recorded)
    assert plan_problems(path, recorded.statements) == []


def test_the_budget_gate_reads_stored_totals_by_index(cli, env, database, recorded, tmp_path):
    """A send to a capped member in a fleet with a budget: the spend is the stored totals,
    read by primary key (the member) and by ``idx_members_fleet_status`` (the fleet), and
    no agent's file (docs/usage.md, "Stored totals"). Last in the module: it adds budgets."""
    from cafleet.broker import usage
    from cafleet.delivery import usage as spend

    path, ids = database
    store = open_store(path)
    try:
        capped = ids["crew"][4]
        usage.record_source(
            store, capped, coding_agent="claude", session_id="s", data_dir=str(tmp_path), cwd="/", budget_tokens=10**9
        )
        usage.set_fleet_budget(store, ids["fleet"], None, 10**9)
        spend.refresh(store, ids["fleet"])  # the keeper's read: totals stored
    finally:
        store.close()
    recorded.statements.clear()
    sent = cli(
        "message",
        "send",
        "--from-member-id",
        str(ids["director"]),
        "--to-member-id",
        str(capped),
        "go",
        environ=env_for(env, path),
    )
    assert sent.code == 0, sent
    assert [caller for caller in callers(recorded) if caller in ("spent_totals", "refresh", "sources")] == [
        "spent_totals"
    ]
    assert plan_problems(path, recorded.statements) == []
