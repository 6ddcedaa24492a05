"""The fleet keeper (docs/delivery.md, "The fleet keeper"): a preview that cannot be typed
when it is sent is delivered as soon as the pane can take it, with no command running.

Real panes on a private tmux server, the real command line, the stand-in agent. The test
environment turns the keeper off; these tests turn it on, and the ``fleet`` fixture ends
every keeper of the test's database by its pid at teardown, failing the test if one it
did not know of was left running (tests/support/keeper.py). Every wait is bounded
(``wait_for``); none is a timed assertion.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.support.keeper import (
    alive,
    assert_none_left,
    end_every_keeper,
    keeper,
    keeper_on,
    keeper_processes,
    kept_fleet_with_host,
    kill,
    log_lines,
    running_keeper,
)
from tests.support.pane_fleet import preview_line, start, tmux_fleet
from tests.support.remote_fleet import create_remote
from tests.support.tmux_fixtures import wait_for
from tests.support.watch_stream import Stream

KEEPER_RETRIES = "The fleet keeper retries it as soon as the pane can take it. Do not resend."


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    """A fleet in a real pane with the keeper on (`fleet create` starts it)."""
    keeper_on(env, monkeypatch)
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        try:
            yield pane_fleet
        finally:
            end_every_keeper(pane_fleet)


@pytest.fixture
def remote(env, tmp_path, monkeypatch):
    """(fleet, host): a fleet with the keeper on and a host reached over a real sshd."""
    with kept_fleet_with_host(env, tmp_path, monkeypatch) as (pane_fleet, host):
        yield pane_fleet, host


@pytest.fixture
def held(tmp_path):
    from tests.support.pause import held_commands

    yield from held_commands(tmp_path)


@pytest.fixture
def fleet_without_keeper(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        try:
            yield pane_fleet
        finally:
            assert_none_left(pane_fleet.db)


def asking_member(fleet) -> dict:
    asking = fleet.attach("asking", "--permission-prompt")
    wait_for(lambda: fleet.input_row(asking["pane_id"]) == "  2. No", what="the permission prompt")
    return asking


def answer(fleet, pane: str) -> None:
    fleet.server.run("send-keys", "-t", pane, "1", "Enter")  # the user answers the prompt
    wait_for(lambda: fleet.input_row(pane) == ">", what="the prompt to be answered")


def submitted(fleet, member_id: int, count: int, timeout: float = 30) -> list[str]:
    return wait_for(
        lambda: len(fleet.submits(member_id)) >= count and fleet.submits(member_id),
        timeout=timeout,
        interval=0.05,
        what=f"{count} preview(s) submitted to member {member_id}",
    )


def stamped(fleet, *message_ids: int) -> None:
    wait_for(
        lambda: all(fleet.notified_at(message_id) is not None for message_id in message_ids),
        what=f"messages {message_ids} stamped",
    )


# --- (a) a send right after `member create`, the Director blocked in `message wait` ------------


def test_a_preview_owed_at_start_up_is_delivered_while_the_director_waits(fleet):
    """The member's agent draws its input box seconds after `member create` returns; the
    send right after it is owed; the Director then blocks in `message wait` and runs
    nothing else. The keeper types the preview once, as soon as the box is there."""
    running_keeper(fleet)
    gate = fleet.records_dir / "draw-the-box"  # the box appears when the test says, not after a delay
    fleet.server.run("set-environment", "-g", "CAFLEET_STANDIN_START_GATE", str(gate))
    created = fleet.cafleet(
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        "slow",
        "--description",
        "draws its input box late",
        "--coding-agent",
        "standin",
        "--json",
        "Wait for tasks.",
    )
    assert created.code == 0, created
    member = created.json()["member_id"]
    sent = fleet.send(fleet.director, member, "first task", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False), sent
    assert sent.err.startswith(f"Warning: message 1 is stored but member {member} was not notified: ")
    assert sent.err.endswith(KEEPER_RETRIES + "\n")
    waiting = start(["message", "wait", str(fleet.director), "--json"], fleet.environ)
    gate.touch()
    try:
        assert submitted(fleet, member, 1) == [preview_line(sent.json())]
        stamped(fleet, 1)
        assert waiting.poll() is None  # the Director is still waiting: no command delivered it
        reply = fleet.send(member, fleet.director, "on it")
        assert reply.code == 0, reply
        out, err = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0 and [r["text"] for r in json.loads(out)] == ["on it"], err
    assert fleet.submits(member) == [preview_line(sent.json())]  # exactly once


# --- a member on another host: the host comes back ---------------------------------------------


@pytest.mark.slow
def test_a_preview_owed_to_an_unreachable_host_follows_when_it_answers_again(remote):
    fleet, host = remote
    running_keeper(fleet)
    created = create_remote(fleet, host, "far", "--json")
    assert created.code == 0, created
    member = created.json()["member_id"]
    fleet.wait_ready(member)
    host.stop()  # sshd gone and the shared connection closed: the host cannot be reached
    sent = fleet.send(fleet.director, member, "are you there?", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False), sent
    assert f"host {host.alias} cannot be reached over SSH" in sent.err and sent.err.endswith(KEEPER_RETRIES + "\n")
    log = keeper(fleet)["log"]
    wait_for(
        lambda: any(f"member {member} still owed message 1: host " in line for line in log_lines(log)),
        what="the keeper to find the host unreachable",
    )
    host.start()  # no command runs after this
    assert submitted(fleet, member, 1) == [preview_line(sent.json())]
    stamped(fleet, 1)


# --- (b) a permission prompt holds the preview until it is answered ----------------------------


def test_b_a_preview_held_by_a_permission_prompt_follows_the_answer(fleet):
    running_keeper(fleet)
    asking = asking_member(fleet)
    member, pane = asking["member_id"], asking["pane_id"]
    sent = fleet.send(fleet.director, member, "first task", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False)
    assert "shows a prompt awaiting its user" in sent.err and sent.err.endswith(KEEPER_RETRIES + "\n")
    log = keeper(fleet)["log"]
    wait_for(
        lambda: any(f"member {member} still owed message 1: " in line for line in log_lines(log)),
        what="the keeper to find the preview held",
    )
    assert fleet.records(member) == []  # not a key reached the prompt
    answer(fleet, pane)  # no command runs after this
    assert submitted(fleet, member, 1) == [preview_line(sent.json())]
    stamped(fleet, 1)
    assert [(r["kind"], r.get("text")) for r in fleet.records(member)] == [
        ("permission", "1"),
        ("submit", preview_line(sent.json())),
    ]


# --- (c) a person's half-typed text is never submitted -----------------------------------------


def test_c_half_typed_text_is_left_alone_and_the_preview_follows_once_cleared(fleet):
    running_keeper(fleet)
    typing = fleet.attach("typing", "--prefill", "fix the te")
    member, pane = typing["member_id"], typing["pane_id"]
    wait_for(lambda: fleet.input_row(pane) == "> fix the te", what="the half-typed text")
    sent = fleet.send(fleet.director, member, "first task", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False)
    assert "held: input box has text" in sent.err and sent.err.endswith(KEEPER_RETRIES + "\n")
    log = keeper(fleet)["log"]
    wait_for(
        lambda: any(f"member {member} still owed message 1: held: " in line for line in log_lines(log)),
        what="the keeper to hold the preview",
    )
    assert fleet.input_row(pane) == "> fix the te" and fleet.records(member) == []  # untouched
    fleet.server.run("send-keys", "-t", pane, "C-u")  # the person clears their text
    assert submitted(fleet, member, 1) == [preview_line(sent.json())]
    stamped(fleet, 1)
    assert fleet.submits(member) == [preview_line(sent.json())]  # their text was never submitted


# --- (d) a keeper killed with SIGKILL is replaced ------------------------------------------------


def test_d_a_killed_keeper_is_replaced_by_the_next_command_that_leaves_a_preview_owed(fleet):
    first_keeper = running_keeper(fleet)
    asking = asking_member(fleet)
    member, pane = asking["member_id"], asking["pane_id"]
    first = fleet.send(fleet.director, member, "first task", "--json")
    assert first.json()["notified"] is False and first.err.endswith(KEEPER_RETRIES + "\n")

    kill(first_keeper["pid"])  # SIGKILL: no last word, its record stays behind
    assert keeper(fleet)["running"] is False  # a dead keeper's record reads "not running"
    second = fleet.send(fleet.director, member, "second task", "--json")
    assert second.json()["notified"] is False and second.err.endswith(KEEPER_RETRIES + "\n")
    replacement = running_keeper(fleet, other_than=first_keeper["pid"])
    # a keeper started at the same moment finds the lock held and exits on its own
    wait_for(lambda: keeper_processes(fleet.db) == [replacement["pid"]], what="one keeper left")

    answer(fleet, pane)
    previews = [preview_line(first.json()), preview_line(second.json())]
    assert submitted(fleet, member, 2) == previews  # each once, oldest first: nothing lost or doubled
    stamped(fleet, 1, 2)
    assert fleet.submits(member) == previews


# --- (e) two keepers started at once leave exactly one --------------------------------------------


def test_e_two_keepers_started_at_once_leave_exactly_one(fleet):
    kill(running_keeper(fleet)["pid"])  # the one `fleet create` started
    argv = [sys.executable, "-m", "cafleet", "fleet", "keep", str(fleet.fleet_id)]
    both = [
        subprocess.Popen(argv, env=fleet.environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    try:
        ended = wait_for(lambda: [p for p in both if p.poll() is not None], timeout=30, what="one keeper to give way")
        [loser] = ended
        [winner] = [p for p in both if p is not loser]
        out = loser.stdout.read()
        assert loser.returncode == 0 and "another keeper already runs" in out, out
        assert f"keeper for fleet {fleet.fleet_id} ended: another keeper already runs" in out.splitlines()[-1]
        record = keeper(fleet)
        assert record["running"] and record["pid"] == winner.pid and winner.poll() is None
        assert keeper_processes(fleet.db) == [winner.pid]
    finally:
        for process in both:
            if process.poll() is None:
                kill(process.pid)
                process.wait()
            process.stdout.close()


# --- (f) it ends with its fleet, with its Director's pane, on SIGTERM -----------------------------


@pytest.mark.parametrize("ending", ["fleet deleted", "Director's pane gone", "SIGTERM"])
def test_f_the_keeper_ends_with_a_last_log_line(fleet, ending):
    ends_with_its_line(fleet, ending)


def test_f_a_sigterm_as_the_keeper_starts_still_ends_it_with_its_line(fleet_without_keeper, held):
    """The window between the start line and the loop: the keeper, stopped there by a
    pause point, is sent SIGTERM, then let go; it ends with its last line, not killed."""
    fleet = fleet_without_keeper
    proc, release = held(fleet.environ, "keep.started", "fleet", "keep", str(fleet.fleet_id))
    proc.send_signal(signal.SIGTERM)
    release()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (out, err)
    lines = out.decode().splitlines()
    assert lines[-1].endswith(f"keeper[{proc.pid}] keeper for fleet {fleet.fleet_id} ended: stopped by SIGTERM"), lines
    assert keeper(fleet)["running"] is False


def test_fleet_keep_json_prints_one_object_per_event(fleet_without_keeper, tmp_path):
    fleet = fleet_without_keeper
    out = tmp_path / "keep.jsonl"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cafleet", "fleet", "keep", str(fleet.fleet_id), "--json"],
            env=fleet.environ,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: out.read_bytes().endswith(b"\n"), timeout=30, what="the keeper's first event")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            kill(proc.pid)
            proc.wait()
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert events[0]["event"].startswith(f"keeper for fleet {fleet.fleet_id} started (database ")
    assert all(set(event) >= {"at", "pid", "event"} and event["pid"] == proc.pid for event in events)
    assert events[-1]["ended"] == "stopped by SIGTERM"
    assert events[-1]["event"] == f"keeper for fleet {fleet.fleet_id} ended: stopped by SIGTERM"


@pytest.mark.stores("postgres")  # an flock is held for as long as its holder lives: SQLite has no session to end
def test_f_a_keeper_whose_lock_session_ends_takes_the_lock_again_or_ends_saying_why(fleet, pg_cluster):
    """A server restart, a failover or an administrator ends the keeper's lock session.
    Before: the keeper ended, and no keeper ran until the next command that owed a preview.
    Now it takes the lock again on a new session and goes on, the same process; only when no
    session can be had within CAFLEET_PG_RECONNECT_TIMEOUT does it end, with its line."""
    record = running_keeper(fleet)
    pid, log = record["pid"], record["log"]
    ended = fleet.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name LIKE 'cafleet-keeper %'"
    )
    assert ended == [(True,)]
    wait_for(
        lambda: any("the lock is taken again on a new session" in line for line in log_lines(log)),
        timeout=30,
        what="the keeper to take its lock again",
    )
    assert alive(pid) and keeper(fleet)["pid"] == pid and keeper(fleet)["running"] is True
    assert fleet.query(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name LIKE 'cafleet-keeper %'"
    ) == [(1,)]

    kill(pid)  # then a keeper that may wait 1 s for a session, on a database that lets nobody in
    wait_for(lambda: not alive(pid), timeout=30, what="the keeper to end")
    argv = [sys.executable, "-m", "cafleet", "fleet", "keep", str(fleet.fleet_id)]
    environ = dict(fleet.environ, CAFLEET_PG_RECONNECT_TIMEOUT="1")
    proc = subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    database = fleet.db.split("@/", 1)[1].split("?", 1)[0]
    try:
        wait_for(lambda: keeper(fleet)["pid"] == proc.pid, timeout=30, what="the new keeper")
        pg_cluster.admin(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
        pg_cluster.admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{database}' AND application_name LIKE 'cafleet-keeper %'"
        )
        proc.wait(timeout=60)  # 0, or 1 when its store's own reconnection gave up first
        last = proc.stdout.read().splitlines()[-1]
    finally:
        pg_cluster.admin(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        if proc.poll() is None:
            kill(proc.pid)
            proc.wait()
        proc.stdout.close()
    # Whichever of its sessions meets the closed database first, it ends saying it gave up.
    assert f"keeper[{proc.pid}] keeper for fleet {fleet.fleet_id} ended: " in last, last
    assert "gave up" in last and "1.0 s" in last, last
    assert "is not currently accepting connections" in last, last


def ends_with_its_line(fleet, ending: str) -> None:
    record = running_keeper(fleet)
    pid, log = record["pid"], record["log"]
    if ending == "fleet deleted":
        assert fleet.cafleet("fleet", "delete", str(fleet.fleet_id)).code == 0
        why = f"fleet {fleet.fleet_id} was deleted"
    elif ending == "SIGTERM":
        os.kill(pid, signal.SIGTERM)
        why = "stopped by SIGTERM"
    else:
        fleet.server.run("kill-pane", "-t", fleet.director_pane)
        why = f"the Director's pane {fleet.director_pane} is gone"
    wait_for(lambda: not alive(pid), timeout=30, what="the keeper to end")
    assert log_lines(log)[-1].endswith(f"keeper[{pid}] keeper for fleet {fleet.fleet_id} ended: {why}")
    assert keeper(fleet)["running"] is False


@pytest.mark.stores("postgres")  # SQLite has no session to end
def test_the_keeper_reconnects_when_the_server_ends_its_store_session(fleet):
    """The server ends the keeper's store and LISTEN sessions (not its lock's): it
    reconnects and goes on delivering, the same keeper."""
    record = running_keeper(fleet)
    asking = asking_member(fleet)
    member, pane = asking["member_id"], asking["pane_id"]
    sent = fleet.send(fleet.director, member, "first task", "--json")
    assert sent.json()["notified"] is False and sent.err.endswith(KEEPER_RETRIES + "\n")
    ended = fleet.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND application_name NOT LIKE 'cafleet-keeper %'"
    )
    assert ended and all(row == (True,) for row in ended)
    answer(fleet, pane)
    assert submitted(fleet, member, 1) == [preview_line(sent.json())]
    stamped(fleet, 1)
    assert keeper(fleet)["pid"] == record["pid"] and alive(record["pid"])


# --- (g) fleet show and doctor report it ---------------------------------------------------------


def test_g_fleet_show_doctor_and_watch_report_the_keeper(fleet):
    record = running_keeper(fleet)
    pid, since = record["pid"], record["since"]
    assert since is not None and record["log"].endswith(f"-{fleet.fleet_id}.log")
    shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id)).out.splitlines()
    assert shown[-1] == f"keeper: running, pid {pid} since {since} (log {record['log']})"
    doctor = fleet.cafleet("doctor", "--json").json()["keepers"]
    assert doctor["enabled"] is True
    assert [(f["fleet_id"], f["running"], f["pid"], f["since"]) for f in doctor["fleets"]] == [
        (fleet.fleet_id, True, pid, since)
    ]
    text = fleet.cafleet("doctor").out
    assert f"fleet {fleet.fleet_id}: keeper running, pid {pid} since {since}" in text
    watch = Stream(fleet.environ, fleet.fleet_id, "--interval", "0.5")
    try:
        event = watch.wait_event(lambda e: e["event"] == "keeper")
        assert event["detail"] == f"keeper running, pid {pid} since {since} (log {record['log']})"
    finally:
        watch.stop()

    kill(pid)
    shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id)).out.splitlines()
    assert shown[-1] == "keeper: not running"
    [entry] = fleet.cafleet("doctor", "--json").json()["keepers"]["fleets"]
    assert (entry["running"], entry["pid"]) == (False, None)


# --- (h) a keeper that stopped beating reads stalled, not running --------------------------------


def quick_clocks(env, monkeypatch) -> None:
    """The keeper's heartbeat and the Director's notices on short clocks (set before any pane
    or server starts: they, and every keeper, inherit them). The defaults: a keeper reads
    stalled after 30 s without a heartbeat; a dialog is noticed after 30 s, looked for every 15 s."""
    for key, value in (
        ("CAFLEET_KEEPER_STALLED_AFTER", "3"),
        ("CAFLEET_NOTICE_AWAITING_AFTER", "1"),
        ("CAFLEET_NOTICE_INTERVAL", "0.5"),
    ):
        env[key] = value
        monkeypatch.setenv(key, value)


@pytest.fixture
def quick_fleet(env, tmp_path, monkeypatch):
    """``fleet`` with :func:`quick_clocks`."""
    keeper_on(env, monkeypatch)
    quick_clocks(env, monkeypatch)
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        try:
            yield pane_fleet
        finally:
            end_every_keeper(pane_fleet)


def webui_keeper(fleet) -> dict:
    """The keeper as the WebUI's `GET /api/fleets/{id}` reports it (its roster events carry the same)."""

    from tests.support.web_server import make_app, web_client

    with web_client(make_app(fleet.db, fleet.environ)) as client:
        response = client.get(f"/api/fleets/{fleet.fleet_id}")
    assert response.status_code == 200, response.text
    return response.json()["keeper"]


class RosterKeeper:
    """The keeper's state as the WebUI's event stream carries it: a FleetWatch as the server
    makes one (through a pool, with the server's settings), looked at as a stream's tick does."""

    def __init__(self, fleet) -> None:
        from cafleet import config
        from cafleet.web.app import StorePool
        from cafleet.web.events import FleetWatch, SharedChanges

        self.pool = StorePool(fleet.db, 5.0)
        self.changes = SharedChanges(self.pool, 0.0)
        self.watch = FleetWatch(self.pool, fleet.fleet_id, self.changes, config.Settings(fleet.environ, fleet.db))

    def states(self) -> list[str]:
        """The keeper states of the roster events of one look (the states are looked at every 5 s)."""
        self.changes.check()
        return [data["keeper"]["state"] for name, data in self.watch.poll() if name == "roster"]

    def close(self) -> None:
        self.changes.close()
        self.pool.close()


def test_h_a_stopped_keeper_reads_stalled_until_it_is_continued(quick_fleet):
    """A keeper stopped with SIGSTOP holds its lock and its pid lives, yet it does nothing:
    before, `fleet show` and `doctor` read it "running" and senders promised its retry. Its
    heartbeat stops, and every reader says "stalled" with what to do; continued, it beats
    again, reads running and delivers what was owed meanwhile."""
    fleet = quick_fleet
    record = running_keeper(fleet)
    pid, since = record["pid"], record["since"]
    asking = asking_member(fleet)
    member, pane = asking["member_id"], asking["pane_id"]
    roster = RosterKeeper(fleet)
    os.kill(pid, signal.SIGSTOP)
    try:
        stalled = wait_for(
            lambda: (found := keeper(fleet)).get("state") == "stalled" and found,
            timeout=60,
            what="the stopped keeper to read stalled",
        )
        assert (stalled["running"], stalled["pid"], stalled["since"]) == (False, pid, since)
        assert stalled["heartbeat_age"] >= 3  # (rounded to a tenth)
        shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id)).out.splitlines()[-1]
        assert shown.startswith(f"keeper: stalled, pid {pid} since {since}: no heartbeat for "), shown
        assert f"`kill -CONT {pid}` if it was stopped, else `kill {pid}`" in shown
        doctor = fleet.cafleet("doctor", "--json")
        section = doctor.json()["keepers"]
        [entry] = section["fleets"]
        assert (section["ok"], entry["ok"], entry["state"], entry["pid"]) == (False, False, "stalled", pid)
        assert f"kill -CONT {pid}" in section["fix"]
        assert f"fleet {fleet.fleet_id}: keeper stalled, pid {pid} since {since}" in fleet.cafleet("doctor").out
        web = webui_keeper(fleet)
        assert (web["state"], web["running"], web["pid"], web["enabled"]) == ("stalled", False, pid, True)
        wait_for(lambda: "stalled" in roster.states(), timeout=30, what="a roster event with the keeper stalled")

        sent = fleet.send(fleet.director, member, "first task", "--json")
        assert (sent.code, sent.json()["notified"]) == (0, False), sent
        assert "retries it as soon as" not in sent.err
        assert f"The fleet keeper of fleet {fleet.fleet_id} is stalled (pid {pid}, no heartbeat for " in sent.err
        assert sent.err.endswith(
            f"The preview will be retried by the next send to member {member} or a later `cafleet message wait`. "
            "Do not resend.\n"
        )
        assert keeper_processes(fleet.db) == [pid]  # no second keeper beside the one that holds the lock
    finally:
        os.kill(pid, signal.SIGCONT)
        roster.close()
    resumed = wait_for(
        lambda: (found := keeper(fleet))["state"] == "running" and found, timeout=30, what="the keeper to read running"
    )
    assert resumed["pid"] == pid and resumed["heartbeat_age"] < 3
    assert webui_keeper(fleet)["state"] == "running"
    answer(fleet, pane)
    assert submitted(fleet, member, 1) == [preview_line(sent.json())]
    stamped(fleet, sent.json()["message_id"])  # (the Director's notices take ids too)


# --- (i) a keeper that cannot start is said so, with the folder to fix ---------------------------
# As root (the tests' user) a folder's mode stops nobody, so "cannot be written" is made of a
# regular file where the folder should be: nothing can be created under it, for any user.


def test_i_a_keeper_folder_that_cannot_be_written_is_named_instead_of_a_retry_promise(fleet):
    """SQLite: the keeper's lock, record and log live in the lock folder beside the database;
    PostgreSQL: its log folder under $XDG_STATE_HOME (its lock is an advisory lock)."""
    asking = asking_member(fleet)
    record = running_keeper(fleet)
    kill(record["pid"])
    folder = os.path.dirname(record["log"])
    moved = folder + ".moved"
    os.rename(folder, moved)
    with open(folder, "w"):
        pass  # a regular file where the folder was
    postgres = fleet.db.startswith("postgresql")
    sent = fleet.send(fleet.director, asking["member_id"], "first task", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False), sent
    assert "retries it as soon as" not in sent.err
    which = "log" if postgres else "lock"
    assert (
        f"No fleet keeper could be started for fleet {fleet.fleet_id}: its {which} folder {folder} cannot be written ("
        in sent.err
    ), sent.err
    assert "make it a writable folder" in sent.err
    assert keeper_processes(fleet.db) == []


@pytest.mark.stores("sqlite")  # the lock is a file only on SQLite (PostgreSQL's is an advisory lock)
def test_i_a_keeper_that_ends_as_it_starts_is_reported_with_its_reason(fleet):
    """The log can be written, so the keeper starts, but it cannot take its lock: before, the
    sender promised its retry all the same. The sender waits for it to hold its lock or end,
    and says what became of it."""
    asking = asking_member(fleet)
    record = running_keeper(fleet)
    kill(record["pid"])
    lock = record["log"].removesuffix(".log") + ".lock"
    os.unlink(lock)
    os.mkdir(lock)  # a folder where the lock file should be: it cannot be opened for writing, even by root
    sent = fleet.send(fleet.director, asking["member_id"], "first task", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False), sent
    assert "retries it as soon as" not in sent.err
    assert (
        f"The fleet keeper started for fleet {fleet.fleet_id} ended at once: its lock or record in "
        f"{os.path.dirname(lock)} cannot be written (" in sent.err
    ), sent.err
    assert f"(log {record['log']})" in sent.err
    assert keeper(fleet)["running"] is False


# --- (j) a killed keeper while the Director waits and a member blocks on a dialog ---------------


def test_j_a_keeper_killed_while_the_director_waits_is_started_again_and_the_notice_arrives(quick_fleet):
    """The Director blocks in `message wait`; its keeper is killed (a PostgreSQL session
    ended, an OOM kill); a member then blocks on a dialog, and no other command runs. Before,
    nothing started a keeper and the notice never came. The wait looks after its fleet's
    keeper while it waits, so one runs again and the notice arrives."""
    fleet = quick_fleet
    first = running_keeper(fleet)["pid"]
    waiting = start(["message", "wait", str(fleet.director), "--json"], fleet.environ)
    try:
        kill(first)
        wait_for(  # started again by the Director's wait, which looks after it every 10 s
            lambda: (found := keeper(fleet))["running"] and found["pid"] not in (None, first),
            timeout=60,
            what="a keeper started again",
        )
        asking = asking_member(fleet)  # the member blocks on a dialog
        out, err = waiting.communicate(timeout=75)  # the bound, after the block
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, err
    [notice] = json.loads(out)
    assert notice["kind"] == "awaiting_user" and notice["notice"]["member_id"] == asking["member_id"], notice


@pytest.mark.parametrize("command", ["member create", "message wait", "message listen", "fleet watch"])
def test_k_every_command_that_needs_the_keeper_starts_one_when_none_runs(fleet, command):
    """Before, only a command that left a preview owed started one: a keeper killed before
    `member create`, the Director's `message wait` or `listen`, or a `fleet watch` with nothing
    owed, stayed dead, and no member that blocked got a notice."""
    first = running_keeper(fleet)["pid"]
    kill(first)
    assert keeper(fleet)["running"] is False
    if command == "member create":
        fleet.create("late")
        running_keeper(fleet, other_than=first)
        return
    args = {
        "message wait": ["message", "wait", str(fleet.director), "--timeout", "60"],
        "message listen": ["message", "listen", str(fleet.director)],
        "fleet watch": ["fleet", "watch", str(fleet.fleet_id), "--interval", "0.5"],
    }[command]
    proc = start(args, fleet.environ)
    try:
        running_keeper(fleet, other_than=first)
    finally:
        proc.kill()
        proc.communicate()


# --- (l) a pane that is gone, the Director's pane gone ------------------------------------------


def test_l_a_message_owed_to_a_pane_that_is_gone_says_so_and_what_to_do(fleet):
    """The tmux server dies: every pane with it. Before, the send promised the keeper's
    retry (the keeper was still running, or had just ended with the Director's pane)."""
    member = fleet.create("m")["member_id"]
    pid = running_keeper(fleet)["pid"]
    fleet.server.kill()
    sent = fleet.send(fleet.director, member, "are you there?", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False), sent
    assert "retries it as soon as" not in sent.err and "will be retried" not in sent.err
    assert f"Member {member}'s pane is gone: it waits until `cafleet member revive {member}` starts" in sent.err
    assert f"`cafleet fleet restore {fleet.fleet_id}` from a new pane), and the fleet keeper" in sent.err, sent.err
    wait_for(lambda: not alive(pid), timeout=30, what="the keeper to end with its Director's pane")


def test_l_with_the_directors_pane_gone_a_send_says_no_keeper_can_run(fleet):
    asking = asking_member(fleet)
    pid = running_keeper(fleet)["pid"]
    fleet.server.run("kill-pane", "-t", fleet.director_pane)
    wait_for(lambda: not alive(pid), timeout=30, what="the keeper to end")
    sent = fleet.send(fleet.director, asking["member_id"], "first task", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False), sent
    assert "retries it as soon as" not in sent.err
    assert (
        f"No fleet keeper can run for fleet {fleet.fleet_id}: the Director's pane {fleet.director_pane} is gone. "
        f"The preview will be retried by the next send to member {asking['member_id']}" in sent.err
    ), sent.err
    assert keeper_processes(fleet.db) == []


# --- the keeper turned off: `fleet watch` does its job --------------------------------------------


def test_with_the_keeper_off_fleet_watch_delivers_as_soon_as_the_pane_can_take_it(fleet_without_keeper):
    """The watch's own retry runs once a round; with a round far longer than the test's
    bound, only the keeper's delivery inside the watch can type the preview in time."""
    fleet = fleet_without_keeper
    assert keeper(fleet) == dict(keeper(fleet), running=False, enabled=False)
    asking = asking_member(fleet)
    member, pane = asking["member_id"], asking["pane_id"]
    sent = fleet.send(fleet.director, member, "first task", "--json")
    assert sent.json()["notified"] is False and "The preview will be retried by the next send" in sent.err
    assert (
        f"The fleet keeper is off (CAFLEET_KEEPER=off; `cafleet fleet watch {fleet.fleet_id}` does its work" in sent.err
    )
    watch = Stream(fleet.environ, fleet.fleet_id, "--interval", "3600")
    try:
        watch.wait_event(
            lambda e: (
                e["event"] == "keeper"
                and e["detail"] == "keeper off (CAFLEET_KEEPER=off): this watch delivers owed previews while it runs"
            )
        )
        answer(fleet, pane)
        assert submitted(fleet, member, 1) == [preview_line(sent.json())]
        stamped(fleet, 1)
        watch.wait_event(lambda e: e["event"] == "notify" and e["detail"] == "preview of message 1 delivered on retry")
    finally:
        watch.stop()
    assert keeper_processes(fleet.db) == []  # the watch started none
