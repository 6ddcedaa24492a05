"""`cafleet fleet watch` with real panes: dead, idle, blocked, stuck previews, a busy
database and a member deleted mid-watch."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import subprocess
import sys
import uuid

import pytest

from cafleet.broker import members
from tests.support.pause import held_commands
from tests.support.postgres import terminate
from tests.support.tmux_fixtures import wait_for
from tests.support.watch_stream import Stream

STANDIN = [sys.executable, "-m", "cafleet.agents.standin"]


@pytest.fixture
def fleet(env, cli, tmux_server, tmp_path):
    """A fleet whose Director is the tmux server's main pane, plus a helper to add members
    whose panes run the stand-in agent (registered through the broker)."""
    director_pane = tmux_server.main_pane()
    environ = dict(env, **tmux_server.environ_for(director_pane), CAFLEET_SUBMIT_SETTLE="0.1")
    created = cli("fleet", "create", "--name", "watched", "--coding-agent", "standin", "--json", environ=environ).json()
    fleet_id = created["fleet_id"]
    session = (
        f"{tmux_server.run('display-message', '-p', '-t', director_pane, '#{session_id}').strip()}@{tmux_server.socket}"
    )

    def add(name, *standin_args, store):
        member_id = members.register_member(
            store,
            fleet_id=fleet_id,
            name=name,
            description=name,
            backend="tmux",
            session=session,
            window_id="@0",
            coding_agent="standin",
        )
        record = tmp_path / f"{name}.jsonl"
        pane = tmux_server.new_pane([*STANDIN, "--member-id", str(member_id), "--record", str(record), *standin_args])
        members.set_pane_id(store, member_id, pane)

        def ready():
            screen = tmux_server.run("capture-pane", "-p", "-t", pane)
            return "1. Yes" in screen or any(line.startswith(">") for line in screen.splitlines())

        wait_for(ready, what="stand-in ready")
        return member_id, pane, record

    return fleet_id, created["director_member_id"], environ, add


def test_dead_member_reported_once(fleet, store, tmux_server, cli):
    """How soon a death is seen is a matter of rounds and load (bench/ measures it); here
    it must be seen, once, with the command to run."""
    fleet_id, director, environ, add = fleet
    member_id, pane, _ = add("doomed", store=store)
    stream = Stream(environ, fleet_id, "--interval", "0.5", "--idle-after", "600")
    try:
        note = cli(
            "message",
            "send",
            "--from-member-id",
            str(member_id),
            "--to-member-id",
            str(director),
            "alive",
            "--json",
            environ=environ,
        ).json()
        stream.wait_event(lambda e: e["event"] == "message" and e["message_id"] == note["message_id"], timeout=60)
        stream.drain_for(1.2)  # the stream is running: a few rounds with the pane alive
        assert stream.count("dead", member_id) == 0
        tmux_server.run("kill-pane", "-t", pane)
        dead = stream.wait_event(lambda e: e["event"] == "dead" and e["member_id"] == member_id, timeout=60)
        assert dead["fleet_id"] == fleet_id and dead["command"] == f"cafleet member delete {member_id}"
        assert dead["detail"] == f"pane {pane} is gone"
        stream.drain_for(1.5)
        assert stream.count("dead", member_id) == 1
    finally:
        assert stream.stop() == 0
    assert stream.events[-1]["event"] == "end" and stream.events[-1]["detail"] == "watch ended: stopped by SIGTERM"


def test_idle_once_per_episode(fleet, store, cli):
    fleet_id, director, environ, add = fleet
    member_id, _, _ = add("sleepy", store=store)
    stream = Stream(environ, fleet_id, "--interval", "0.3", "--idle-after", "1.5")

    def send_as_member(body: str) -> None:
        sent = cli(
            "message",
            "send",
            "--from-member-id",
            str(member_id),
            "--to-member-id",
            str(director),
            body,
            environ=environ,
        )
        assert sent.code == 0, sent

    try:
        # Nothing sent, received or acked yet: silent (from registration), never idle.
        silent = stream.wait_event(lambda e: e["event"] == "silent" and e["member_id"] == member_id, timeout=10)
        assert silent["command"] == f"cafleet member capture {member_id}"
        stream.drain_for(1.0)
        assert (stream.count("silent", member_id), stream.count("idle", member_id)) == (1, 0)
        send_as_member("first words")  # activity: from now on it is idle, or not, by its activity
        first = stream.wait_event(lambda e: e["event"] == "idle" and e["member_id"] == member_id, timeout=10)
        assert first["command"] == f"cafleet member capture {member_id}"
        stream.drain_for(1.0)
        assert stream.count("idle", member_id) == 1
        send_as_member("back at work")  # activity ends the episode
        stream.wait_event(lambda e: e["event"] == "message" and e["member_id"] == member_id and "back" in str(e))
        stream.wait_event(
            lambda e: e["event"] == "idle" and e["member_id"] == member_id and e is not first and e["at"] > first["at"],
            timeout=10,
        )
        assert stream.count("idle", member_id) == 2 and stream.count("silent", member_id) == 1
    finally:
        stream.stop()


def test_activity_between_two_rounds_starts_a_new_idle_episode(fleet, store, cli, db_path):
    """The rounds are driven by hand (no clock in the way): with ``idle_after`` 0 a member
    with activity is idle in every round, and a message it sends between two rounds still
    ends the first episode, so the second round reports a new one."""
    from cafleet.config import Settings
    from cafleet.delivery.supervision.watch import Watcher

    fleet_id, director, environ, add = fleet
    member_id, _, _ = add("napper", store=store)
    send = ["message", "send", "--from-member-id", str(member_id), "--to-member-id", str(director)]
    assert cli(*send, "hello", environ=environ).code == 0
    seen = []
    watcher = Watcher(store, Settings(environ, db_path), fleet_id, 5.0, 0.0, seen.append)
    watcher.members_round()
    watcher.members_round()
    assert [(e["event"], e["member_id"]) for e in seen] == [("idle", member_id)]  # once per episode
    assert cli(*send, "back", environ=environ).code == 0
    watcher.members_round()
    watcher.members_round()
    assert [(e["event"], e["member_id"]) for e in seen] == [("idle", member_id), ("idle", member_id)]


def test_a_member_without_message_activity_is_silent_and_never_idle(fleet, store, cli, db_path):
    """The seed: idle is the time since the latest activity, null when there is none. A
    member that has sent, received and acked nothing is ``silent`` once it has been
    registered longer than ``--idle-after`` (its own state and event, measured from
    registration), and becomes ``idle`` only by the activity it then has."""
    from cafleet.config import Settings
    from cafleet.delivery.supervision.watch import Watcher

    fleet_id, director, environ, add = fleet
    member_id, _, _ = add("quiet", store=store)
    seen = []
    watcher = Watcher(store, Settings(environ, db_path), fleet_id, 5.0, 0.0, seen.append)
    watcher.members_round()
    watcher.members_round()
    assert [(e["event"], e["member_id"]) for e in seen] == [("silent", member_id)]  # once
    assert seen[0]["detail"].startswith("no message activity since it was registered ")
    assert seen[0]["command"] == f"cafleet member capture {member_id}"

    def row() -> dict:
        listed = cli("member", "list", str(fleet_id), "--state", "--idle-after", "0", "--json", environ=environ)
        assert listed.code == 0, listed
        return next(r for r in listed.json() if r["member_id"] == member_id)

    assert (row()["state"], row()["idle_seconds"], row()["last_activity_at"]) == ("silent", None, None)
    sent = ["message", "send", "--from-member-id", str(member_id), "--to-member-id", str(director), "done"]
    assert cli(*sent, environ=environ).code == 0
    watcher.members_round()
    assert [(e["event"], e["member_id"]) for e in seen] == [("silent", member_id), ("idle", member_id)]
    assert seen[1]["detail"].startswith("no activity for ")
    now = row()
    assert now["state"] == "idle" and isinstance(now["idle_seconds"], int) and now["last_activity_at"] is not None


def test_blocked_pane_reported(fleet, store, tmux_server):
    fleet_id, _director, environ, add = fleet
    member_id, pane, _ = add("asking", "--permission-prompt", store=store)
    stream = Stream(environ, fleet_id, "--interval", "0.3", "--idle-after", "600")
    try:
        blocked = stream.wait_event(lambda e: e["event"] == "blocked" and e["member_id"] == member_id)
        assert blocked["detail"] == f"pane {pane} shows a prompt awaiting its user"
        stream.drain_for(0.8)
        assert stream.count("blocked", member_id) == 1
    finally:
        stream.stop()


def test_stuck_notification_is_retried_and_stamped(fleet, store, tmux_server, cli):
    fleet_id, director, environ, add = fleet
    member_id, pane, record = add("stuck", "--permission-prompt", store=store)
    sent = cli(
        "message",
        "send",
        "--from-member-id",
        str(director),
        "--to-member-id",
        str(member_id),
        "please do X",
        "--json",
        environ=environ,
    )
    assert sent.code == 0 and sent.json()["notified"] is False
    assert "awaiting its user" in sent.err or "awaits" in sent.err or "prompt" in sent.err
    message_id = sent.json()["message_id"]
    stream = Stream(environ, fleet_id, "--interval", "0.4", "--idle-after", "600")
    try:
        failed = stream.wait_event(lambda e: e["event"] == "notify" and e["message_id"] == message_id)
        assert failed["detail"].startswith(f"preview of message {message_id} still not delivered")
        tmux_server.run("send-keys", "-t", pane, "1", "Enter")  # the user answers the prompt
        delivered = stream.wait_event(
            lambda e: e["event"] == "notify" and e["message_id"] == message_id and "delivered on retry" in e["detail"],
            timeout=15,
        )
        assert delivered["command"] is None
    finally:
        stream.stop()
    row = store.execute("SELECT notified_at FROM messages WHERE message_id = ?", (message_id,)).fetchone()
    assert row[0] is not None
    submits = [json.loads(line) for line in record.read_text().splitlines()]
    previews = [s for s in submits if s["kind"] == "submit" and f"[cafleet msg {message_id} " in s["text"]]
    assert len(previews) == 1


def test_held_preview_is_reported_each_interval_then_delivered(fleet, store, tmux_server, cli):
    """Someone is typing in the member's input box: watch reports the preview as held
    (their text untouched) and delivers it once the box is empty."""
    fleet_id, director, environ, add = fleet
    member_id, pane, record = add("busy", "--prefill", "half a thou", store=store)
    sent = cli(
        "message",
        "send",
        "--from-member-id",
        str(director),
        "--to-member-id",
        str(member_id),
        "please do Y",
        "--json",
        environ=environ,
    )
    assert sent.code == 0 and sent.json()["notified"] is False
    message_id = sent.json()["message_id"]
    stream = Stream(environ, fleet_id, "--interval", "0.4", "--idle-after", "600")
    try:
        held = stream.wait_event(lambda e: e["event"] == "notify" and e["message_id"] == message_id)
        assert f"still not delivered: held: input box has text in pane {pane}" in held["detail"]
        assert not record.exists() or record.read_text() == ""  # not a key reached the box
        tmux_server.run("send-keys", "-t", pane, "-l", "ght")  # the person submits their text
        tmux_server.run("send-keys", "-t", pane, "Enter")
        stream.wait_event(
            lambda e: e["event"] == "notify" and e["message_id"] == message_id and "delivered on retry" in e["detail"],
            timeout=15,
        )
    finally:
        stream.stop()
    texts = [json.loads(line)["text"] for line in record.read_text().splitlines()]
    assert texts[0] == "half a thought" and len(texts) == 2 and f"[cafleet msg {message_id} " in texts[1]


# Another process holds the database's write lock until its stdin closes: SQLite's (a raw
# ``BEGIN IMMEDIATE``, as any program writing the file would), or on PostgreSQL the writers'
# advisory lock every cafleet write transaction takes first (through cafleet's own store).
HOLD_WRITE_LOCK = {
    "sqlite": (
        "import sqlite3,sys\n"
        "c=sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "print('held', flush=True); sys.stdin.read()\n"
    ),
    "postgres": (
        "import sys\n"
        "from cafleet.store.engines import open_store\n"
        "store = open_store(sys.argv[1])\n"
        "with store.write():\n"
        "    store.execute('SELECT 1')  # the writers' lock goes with a transaction's first statement\n"
        "    print('held', flush=True); sys.stdin.read()\n"
    ),
}


def test_survives_busy_database_and_member_deleted(fleet, store, cli, db_path, tmux_server, store_kind):
    """A writer holds the database while watch retries a stuck preview: the stamp fails
    as busy, the stream goes on, and a later round delivers (at least once)."""
    fleet_id, director, environ, add = fleet
    member_id, pane, record = add("leaving", "--permission-prompt", store=store)
    sent = cli(
        "message",
        "send",
        "--from-member-id",
        str(director),
        "--to-member-id",
        str(member_id),
        "stuck",
        "--json",
        environ=environ,
    ).json()
    assert sent["notified"] is False
    tmux_server.run("send-keys", "-t", pane, "1", "Enter")  # healthy again, preview still owed
    holder = subprocess.Popen(  # holds the write lock until the test closes its stdin
        [sys.executable, "-c", HOLD_WRITE_LOCK[store_kind], db_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout.readline() == b"held\n"
    stream = Stream(dict(environ, CAFLEET_BUSY_TIMEOUT="0.3"), fleet_id, "--interval", "0.5", "--idle-after", "600")
    try:
        busy = stream.wait_event(lambda e: e["event"] == "notify" and e["message_id"] == sent["message_id"])
        assert "locked by another process" in busy["detail"]
        holder.stdin.close()  # release the lock only once the busy retry was reported
        holder.wait(timeout=60)
        stream.wait_event(lambda e: e["event"] == "notify" and "delivered on retry" in e["detail"], timeout=15)
        assert stream.proc.poll() is None
        assert cli("member", "delete", str(member_id), environ=environ).code == 0
        stream.drain_for(1.0)
        assert stream.count("dead", member_id) == 0  # a deleted member is not "dead"
        note = cli(
            "message",
            "send",
            "--from-member-id",
            str(director),
            "--to-member-id",
            str(director),
            "note",
            "--json",
            environ=environ,
        ).json()
        stream.wait_event(lambda e: e["event"] == "message" and e["message_id"] == note["message_id"])
        cli("fleet", "delete", str(fleet_id), environ=environ)
        end = stream.wait_event(lambda e: e["event"] == "end")
        assert end["detail"] == f"watch ended: fleet {fleet_id} was deleted"
        assert stream.proc.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        stream.stop()
    typed = [json.loads(line) for line in record.read_text().splitlines()]
    assert sum(1 for t in typed if t["kind"] == "submit" and f"[cafleet msg {sent['message_id']} " in t["text"]) >= 1


@pytest.mark.stores("postgres")
def test_reconnects_when_the_server_ends_its_sessions_and_ends_with_its_line_when_it_gives_up(
    fleet, store, cli, db_path, tmp_path, pg_cluster
):
    """The server ends the watch's sessions (pg_terminate_backend, as a restart or an
    idle_session_timeout would): it reconnects and reports the next message, without
    repeating one; when no connection can be had for CAFLEET_PG_RECONNECT_TIMEOUT it ends
    with its end event and exits 1 with one line."""
    fleet_id, director, environ, _add = fleet
    trace, app = tmp_path / "watch.trace", f"cafleet-watch-{uuid.uuid4().hex[:8]}"
    watched = dict(environ, CAFLEET_TEST_TRACE=str(trace), PGAPPNAME=app, CAFLEET_PG_RECONNECT_TIMEOUT="1")
    database = db_path.split("@/", 1)[1].split("?", 1)[0]

    def note(text):
        return cli(
            "message", "send", "--from-member-id", str(director), "--to-member-id", str(director), text, "--json",
            environ=environ,
        ).json()  # fmt: skip

    def reconnects():
        return trace.read_text(encoding="utf-8").split("\n").count("store.reconnect") if trace.exists() else 0

    stream = Stream(watched, fleet_id, "--interval", "0.5", "--idle-after", "600")
    try:
        first = note("before")
        stream.wait_event(lambda e: e["event"] == "message" and e["message_id"] == first["message_id"])
        assert terminate(db_path, app) >= 2  # its store's session and its LISTEN's
        wait_for(lambda: stream.proc.poll() is not None or reconnects() > 0, timeout=60, what="a reconnection")
        assert stream.proc.poll() is None, stream.proc.stderr.read()
        second = note("after")
        stream.wait_event(lambda e: e["event"] == "message" and e["message_id"] == second["message_id"])
        pg_cluster.admin(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
        terminate(db_path, app)
        end = stream.wait_event(lambda e: e["event"] == "end")
        assert stream.proc.wait(timeout=60) == 1
        err = stream.proc.stderr.read().decode()
    finally:
        pg_cluster.admin(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        stream.stop()
    assert [e["message_id"] for e in stream.events if e["event"] == "message"] == [
        first["message_id"],
        second["message_id"],
    ]
    assert err.startswith("Error: cannot reach database ") and err.count("\n") == 1, err
    assert end["detail"] == "watch ended: " + err.removeprefix("Error: ").rstrip("\n").removesuffix(".")


def test_member_list_and_webui_show_the_same_states(fleet, store, tmux_server, cli):
    from cafleet.web.api import fleet_view, member_states

    fleet_id, director, environ, add = fleet
    alive_id, _, _ = add("alive", store=store)
    blocked_id, _, _ = add("asking", "--permission-prompt", store=store)
    dead_id, dead_pane, _ = add("dead", store=store)
    tmux_server.run("kill-pane", "-t", dead_pane)
    listed = {
        r["member_id"]: r for r in cli("member", "list", str(fleet_id), "--state", "--json", environ=environ).json()
    }
    web = {m["member_id"]: m for m in fleet_view(store, fleet_id, member_states(store, fleet_id))["members"]}
    expected = {director: "director", alive_id: "alive", blocked_id: "blocked", dead_id: "dead"}
    assert {k: v["state"] for k, v in listed.items()} == expected
    assert {k: v["state"] for k, v in web.items()} == expected
    assert listed[dead_id]["state_detail"] == web[dead_id]["state_detail"] == f"pane {dead_pane} is gone"
    text = cli("member", "list", str(fleet_id), "--state", environ=environ).out.splitlines()
    assert text[0].split()[-1] == "STATE"
    assert [line.split()[-1] for line in text[1:]] == ["director", "alive", "blocked", "dead"]


def test_a_fleet_deleted_during_a_round_ends_the_stream_as_deleted(fleet, store, cli, tmp_path):
    """The fleet is deleted after the stream found it live and before it reads its members
    (held exactly there by the pause hook): the round's refused read ends the stream with
    its `end` event and exit 0, not an error."""
    fleet_id, _director, environ, add = fleet
    add("member", store=store)
    marker, go = tmp_path / "paused", tmp_path / "go"
    held = dict(
        environ,
        CAFLEET_TEST_PAUSE_AT="watch.round",
        CAFLEET_TEST_PAUSE_FILE=str(marker),
        CAFLEET_TEST_PAUSE_UNTIL=str(go),
    )
    stream = Stream(held, fleet_id, "--interval", "0.5", "--idle-after", "600")
    try:
        wait_for(lambda: marker.exists() and marker.read_text() == "paused watch.round\n", what="the pause")
        assert cli("fleet", "delete", str(fleet_id), environ=environ).code == 0
        go.touch()
        end = stream.wait_event(lambda e: e["event"] == "end")
        assert end["detail"] == f"watch ended: fleet {fleet_id} was deleted"
        assert stream.proc.wait(timeout=60) == 0, stream.proc.stderr.read()
    finally:
        stream.stop()


@pytest.fixture
def held(tmp_path):
    """``held(environ, point, *args)``: a real command paused at ``point`` (tests/support/pause.py)."""
    yield from held_commands(tmp_path)


def test_a_member_whose_deletion_closed_its_pane_is_not_reported_dead(fleet, store, tmux_server, held):
    """`member delete` closes the pane, then deregisters the member, both under the pane's
    input lock: a round that looks in between must not call the member dead (nor post the
    Director a notice). A second member's death, seen in the same round, proves the round
    looked while the first one's pane was already gone."""
    fleet_id, _, environ, add = fleet
    leaving, leaving_pane, _ = add("leaving", store=store)
    witness, witness_pane, _ = add("witness", store=store)
    proc, release = held(environ, "delete.killed", "member", "delete", str(leaving))
    assert tmux_server.run("list-panes", "-a", "-F", "#{pane_id}").split().count(leaving_pane) == 0
    stream = Stream(environ, fleet_id, "--interval", "0.3", "--idle-after", "600")
    try:
        tmux_server.run("kill-pane", "-t", witness_pane)
        stream.wait_event(lambda e: e["event"] == "dead" and e["member_id"] == witness, timeout=60)
        assert stream.count("dead", leaving) == 0
        release()
        _out, err = proc.communicate(timeout=60)
        assert (proc.returncode, err) == (0, b"")
        stream.drain_for(1.0)
        assert stream.count("dead", leaving) == 0
    finally:
        assert stream.stop() == 0


def test_a_fleets_panes_are_read_in_one_call_and_each_state_is_the_one_its_own_look_gives(
    fleet, store, tmux_server, monkeypatch
):
    """``fleet_states`` (member list --state, fleet watch, the WebUI) reads every pane of a
    server in one tmux call: each member's state and detail are exactly what looking at its
    pane alone says, for every kind of pane, a stale id among them."""
    from cafleet.delivery.supervision import liveness
    from cafleet.mux.tmux import Tmux

    fleet_id, _director, _environ, add = fleet
    alive_id, _, _ = add("alive", store=store)
    blocked_id, _, _ = add("asking", "--permission-prompt", store=store)
    gone_id, gone_pane, _ = add("gone", store=store)
    tmux_server.run("kill-pane", "-t", gone_pane)
    session = members.get_member(store, alive_id)["placement"]["session"]

    def attach(name: str, argv: list[str], identity: str | None = None) -> tuple[int, str]:
        member_id = members.register_member(
            store,
            fleet_id=fleet_id,
            name=name,
            description=name,
            backend="tmux",
            session=session,
            window_id="@0",
            coding_agent="standin",
        )
        pane = tmux_server.new_pane(argv)
        actual = tmux_server.run("display-message", "-p", "-t", pane, "#{pid}:#{start_time}:#{pane_pid}").strip()
        members.set_pane_id(store, member_id, pane, identity or actual)
        return member_id, pane

    exited_id, exited_pane = attach("exited", ["cat"])
    tmux_server.run("set-option", "-w", "-t", exited_pane, "remain-on-exit", "on")
    tmux_server.run("send-keys", "-t", exited_pane, "C-d")
    shell_id, _ = attach("shell", ["sh"])
    stale_id, stale_pane = attach("stale", ["sleep", "600"], identity="1:2:3")
    pending_id = members.register_member(
        store,
        fleet_id=fleet_id,
        name="pending",
        description="pending",
        backend="tmux",
        session=session,
        window_id="@0",
        coding_agent="standin",
    )
    wait_for(
        lambda: tmux_server.run("display-message", "-p", "-t", exited_pane, "#{pane_dead}").strip() == "1",
        what="cat to exit",
    )
    wait_for(
        lambda: liveness.pane_state(members.get_member(store, shell_id), liveness.MuxPool(), 600)[0] == liveness.DEAD,
        what="sh to be the pane's program",
    )

    calls = []
    real = Tmux._call
    monkeypatch.setattr(Tmux, "_call", lambda self, args: calls.append(args[0]) or real(self, args))
    together = liveness.fleet_states(store, fleet_id, liveness.MuxPool(), 600)
    batched = len(calls)
    alone = {
        entry["member_id"]: liveness.pane_state(entry, liveness.MuxPool(), 600)
        for entry in members.roster_detail(store, fleet_id)
        if entry["kind"] != "director"
    }
    assert together == alone
    assert {member_id: state for member_id, (state, _) in together.items()} == {
        alive_id: "alive",
        blocked_id: "blocked",
        gone_id: "dead",
        exited_id: "dead",
        shell_id: "dead",
        stale_id: "dead",
        pending_id: "pending",
    }
    assert together[stale_id][1].startswith(f"tmux pane {stale_pane} is stale: ")
    assert together[exited_id][1] == f"the coding agent in pane {exited_pane} exited"
    assert batched == 2  # one call, and one more for the part after the gone pane
    assert len(calls) - batched == 6  # a look at each pane alone
