"""`cafleet member exec`: a command the Director runs in a member's pane (docs/delivery.md,
"Commands run in a member's pane"). The stand-in agent has claude's `!` shell mode; panes are
a private tmux server's; the `cafleet` the member's shell finds is this checkout's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cafleet.broker import execs, messages, notices
from cafleet.errors import Conflict, NotFound
from tests.support.pane_fleet import start, tmux_fleet
from tests.support.tmux_fixtures import wait_for

STORES = ("sqlite", "postgres")


def write_cafleet_shim(tmp_path) -> None:
    """``cafleet`` on the panes' PATH runs this checkout (before the server starts)."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "cafleet"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m cafleet "$@"\n', encoding="utf-8")
    shim.chmod(0o755)


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    write_cafleet_shim(tmp_path)
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


def shells(fleet, member_id: int) -> list[dict]:
    return [r for r in fleet.records(member_id) if r["kind"] == "shell"]


def member_env(fleet, member_id: int) -> dict:
    return dict(fleet.environ, CAFLEET_MEMBER_ID=str(member_id))


# -- end to end, in a real pane -------------------------------------------------------------


@pytest.mark.stores("sqlite")
def test_exec_wait_runs_the_command_once_in_the_members_pane_and_tells_the_director(fleet, tmp_path):
    created = fleet.create("worker")
    member = created["member_id"]
    cwd = fleet.server.run("display-message", "-p", "-t", created["pane_id"], "#{pane_current_path}").strip()
    command = 'printf "cwd=%s member=%s\\n" "$PWD" "$CAFLEET_MEMBER_ID"; echo to-stderr >&2; exit 3'
    done = fleet.cafleet("member", "exec", str(member), command, "--wait", timeout=90)
    assert done.code == 0, done
    assert done.out.splitlines() == [
        f"exec 1 stored for member {member}",
        f"exec 1 typed into member {member}'s pane",
        "exec 1 finished: exit status 3",
    ]
    assert done.err == ""
    # the pane typed one fixed line naming the id; the stand-in ran it in its shell mode
    [shell] = shells(fleet, member)
    assert shell["text"] == " cafleet member exec-run 1"
    assert shell["status"] == 3
    assert f"member={member}" in shell["output"]
    assert "to-stderr" in shell["output"]
    assert shell["output"].rstrip().endswith("[cafleet exec 1 ended: exit status 3]")
    assert f"cwd={cwd} " in shell["output"]
    # nothing of the command was typed
    assert not any("printf" in r.get("text", "") for r in fleet.records(member) if r["kind"] == "key")
    # the record
    shown = fleet.cafleet("member", "exec", str(member), "--json", "true", "--wait", timeout=90)
    assert shown.code == 0, shown
    second = shown.json()
    assert second["exec_id"] == 2 and second["exit_status"] == 0 and second["outcome"] == "finished"
    row = fleet.query(
        "SELECT command, exit_status, outcome, started_at IS NOT NULL FROM cafleet_aux_execs WHERE exec_id = 1"
    )
    assert row == [(command, 3, "finished", True)]
    # the Director's inbox: one notice per exec, naming its status
    inbox = fleet.cafleet("message", "poll", str(fleet.director), "--json").json()
    finished = sorted((m for m in inbox if m.get("kind") == "exec_finished"), key=lambda m: m["message_id"])
    assert [m["notice"]["subject"] for m in finished] == ["exec:1", "exec:2"]
    assert "finished: exit status 3" in finished[0]["text"]
    # a second run of the same id refuses, and runs nothing
    again = fleet.cafleet("member", "exec-run", "1", environ=member_env(fleet, member))
    assert again.code == 1
    assert again.err.startswith("Error: exec 1 was already started at ")
    assert len(again.err.splitlines()) == 1
    assert again.out == ""


@pytest.mark.stores("sqlite")
def test_exec_records_128_plus_the_signal_that_ended_the_command(fleet):
    member = fleet.create("worker")["member_id"]
    done = fleet.cafleet("member", "exec", str(member), "kill -TERM $$", "--wait", "--json", timeout=90)
    assert done.code == 0, done
    assert done.json()["exit_status"] == 128 + 15
    assert fleet.cafleet("member", "exec", str(member), "kill -KILL $$", "--wait", timeout=90).out.splitlines()[-1] == (
        "exec 2 finished: exit status 137 (killed by SIGKILL)"
    )


@pytest.mark.stores("sqlite")
def test_exec_is_held_while_the_pane_shows_a_dialog_and_typed_once_it_is_answered(fleet):
    member = fleet.attach("asking", "--permission-prompt")
    member_id, pane = member["member_id"], member["pane_id"]
    wait_for(lambda: "Do you want to proceed?" in fleet.server.run("capture-pane", "-p", "-t", pane), what="the dialog")
    waiting = start(["member", "exec", str(member_id), "echo ran", "--wait"], fleet.environ)
    try:
        # the first attempt is refused at the gate (said on stderr), before anyone answers
        warning = waiting.stderr.readline().decode()
        assert warning.startswith(f"Warning: exec 1 is stored but not typed into member {member_id}'s pane yet: ")
        assert "prompt awaiting its user" in warning
        assert [r for r in fleet.records(member_id) if r["kind"] in ("permission", "shell")] == []
        fleet.server.run("send-keys", "-t", pane, "-l", "1")
        fleet.server.run("send-keys", "-t", pane, "Enter")
        out, err = waiting.communicate(timeout=90)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, err
    assert out.decode().splitlines()[-1] == "exec 1 finished: exit status 0"
    assert err == b""
    # the dialog got the person's answer only; the line went in after it
    assert [r["text"] for r in fleet.records(member_id) if r["kind"] == "permission"] == ["1"]
    assert [r["text"] for r in shells(fleet, member_id)] == [" cafleet member exec-run 1"]


@pytest.mark.stores("sqlite")
def test_our_own_line_left_in_shell_mode_by_an_earlier_attempt_is_submitted_as_it_stands(fleet):
    """An attempt that gave up before Enter (the line drew too late) leaves the agent in its
    shell mode with our line: no input box a preview could be typed into, so every later
    attempt would be held for good. The line is ours (it names the exec), so it is
    submitted as it stands, once."""
    created = fleet.create("worker")
    member, pane = created["member_id"], created["pane_id"]
    fleet.server.run("send-keys", "-t", pane, "-l", "! cafleet member exec-run 1")
    wait_for(lambda: fleet.input_row(pane).startswith("!  cafleet member exec-run 1"), what="the line in shell mode")
    done = fleet.cafleet("member", "exec", str(member), "echo once", "--wait", timeout=60)
    assert done.code == 0, done
    assert done.out.splitlines()[-1] == "exec 1 finished: exit status 0"
    assert [r["text"] for r in shells(fleet, member)] == [" cafleet member exec-run 1"]


@pytest.mark.stores("sqlite")
def test_previews_hold_while_an_exec_runs(fleet, tmp_path):
    member = fleet.create("worker")["member_id"]
    gate = tmp_path / "gate"
    waiting = start(
        ["member", "exec", str(member), f"while [ ! -e {gate} ]; do sleep 0.05; done; echo through", "--wait"],
        fleet.environ,
    )
    try:
        wait_for(
            lambda: (
                fleet.query("SELECT count(*) FROM cafleet_aux_execs WHERE started_at IS NOT NULL")[0][0] == 1
                if fleet.query("SELECT count(*) FROM sqlite_master WHERE name = 'cafleet_aux_execs'")[0][0]
                else False
            ),
            what="the exec to start",
        )
        sent = fleet.send(fleet.director, member, "while it runs")
        assert sent.code == 0, sent
        assert "is running exec 1" in sent.err
        assert fleet.submits(member) == []
        # member list --state shows the exec in flight (fleet watch and the WebUI read the same states)
        listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state", "--json").json()
        [entry] = [e for e in listed if e["member_id"] == member]
        assert entry["state"] == "exec"
        shown = execs.shown_command(f"while [ ! -e {gate} ]; do sleep 0.05; done; echo through")
        assert entry["state_detail"] == f"exec 1 running: `{shown}`"
        assert shown.endswith("…")  # never the whole of an arbitrary command
        from tests.support.watch_stream import Stream

        stream = Stream(fleet.environ, fleet.fleet_id, "--interval", "0.3")
        try:
            found = stream.wait_event(lambda e: e["event"] == "exec" and e["member_id"] == member)
        finally:
            stream.stop()
        assert found["detail"] == entry["state_detail"]
        assert found["command"] == f"cafleet member capture {member}"
        gate.write_text("")
        _out, err = waiting.communicate(timeout=90)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, err
    message_id = int(sent.out.split()[2])
    assert fleet.notified_at(message_id) is None
    retried = fleet.cafleet("message", "wait", str(fleet.director), "--timeout", "0")  # retries owed previews
    assert retried.code in (0, 3), retried
    wait_for(lambda: len(fleet.submits(member)) == 1, what="the held preview")
    assert fleet.submits(member)[0].startswith(f"[cafleet msg {message_id} from {fleet.director} ")


@pytest.mark.stores("sqlite")
def test_a_member_that_took_no_turn_after_an_exec_is_told_once_to_continue(fleet):
    from cafleet.delivery.execs import Watcher
    from cafleet.store.engines import open_store

    quiet = fleet.create("quiet")["member_id"]
    talker = fleet.create("talker")["member_id"]
    for member in (quiet, talker):
        done = fleet.cafleet("member", "exec", str(member), "echo out", "--wait", timeout=90)
        assert done.code == 0, done
    said = fleet.send(talker, fleet.director, "saw the output")  # a turn of its own
    assert said.code == 0, said
    store = open_store(fleet.db)
    try:
        watcher = Watcher(store, _settings(fleet.environ, fleet.db, CAFLEET_EXEC_GRACE="0"), fleet.fleet_id)
        watcher.round()
        watcher.round()  # once
    finally:
        store.close()
    assert fleet.submits(quiet) == ["[cafleet exec 1 ended: exit status 0] Continue with the output above."]
    assert fleet.submits(talker) == []
    assert fleet.query("SELECT count(*) FROM cafleet_aux_execs WHERE nudged_at IS NOT NULL")[0][0] == 2


@pytest.mark.stores("sqlite")
def test_the_keeper_types_a_held_exec_once_the_pane_can_take_it(env, tmp_path, monkeypatch):
    from tests.support.keeper import end_every_keeper, keeper_on

    keeper_on(env, monkeypatch)
    write_cafleet_shim(tmp_path)
    with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
        try:
            member = fleet.attach("asking", "--permission-prompt")
            member_id, pane = member["member_id"], member["pane_id"]
            wait_for(
                lambda: "Do you want to proceed?" in fleet.server.run("capture-pane", "-p", "-t", pane),
                what="the dialog",
            )
            done = fleet.cafleet("member", "exec", str(member_id), "echo by-keeper")
            assert done.code == 0, done
            assert done.out.splitlines() == [f"exec 1 stored for member {member_id}"]
            assert done.err.startswith(f"Warning: exec 1 is stored but not typed into member {member_id}'s pane yet: ")
            assert done.err.rstrip().endswith("the fleet keeper types it as soon as the pane can take it.")
            fleet.server.run("send-keys", "-t", pane, "-l", "1")
            fleet.server.run("send-keys", "-t", pane, "Enter")
            wait_for(lambda: shells(fleet, member_id), timeout=30, what="the keeper to type the exec's line")
            wait_for(
                lambda: fleet.query("SELECT outcome FROM cafleet_aux_execs")[0][0] == "finished",
                timeout=30,
                what="the exec to finish",
            )
            assert [r["text"] for r in shells(fleet, member_id)] == [" cafleet member exec-run 1"]
            assert "by-keeper" in shells(fleet, member_id)[0]["output"]
        finally:
            end_every_keeper(fleet)


# -- errors: one line each, nothing stored ---------------------------------------------------


@pytest.fixture
def paneless(store, build):
    fleet_id, director, (m1, m2) = build.fleet()
    return {"fleet": fleet_id, "director": director, "m1": m1, "m2": m2}


def test_exec_refuses_bad_input_with_one_line(cli, paneless, tmp_path, store):
    m1, director = str(paneless["m1"]), str(paneless["director"])
    directory = tmp_path / "a-folder"
    directory.mkdir()
    cases = [
        (["member", "exec", "99", "true"], 1, "Error: member 99 not found."),
        (["member", "exec", director, "true"], 2, f"Error: member {director} is its fleet's Director"),
        (["member", "exec", m1, "  "], 2, "Error: the command is empty; give the command to run."),
        (["member", "exec", m1], 2, "Error: missing the command: give COMMAND or --file PATH"),
        (["member", "exec", m1, "true", "--file", "x"], 2, "Error: give the command either as COMMAND or with --file"),
        (["member", "exec", m1, "--file", str(tmp_path / "missing.sh")], 2, "Error: "),
        (["member", "exec", m1, "--file", str(directory)], 2, "Error: "),
        (["member", "exec", m1, "a" * (execs.MAX_COMMAND_BYTES + 1)], 2, "Error: the command is longer than"),
        (["member", "exec-run", "5"], 1, "Error: exec 5 not found"),
    ]
    for args, code, start_of_error in cases:
        done = cli(*args)
        assert (done.code, done.out) == (code, ""), (args, done)
        assert done.err.startswith(start_of_error), (args, done.err)
        assert len(done.err.splitlines()) == 1, (args, done.err)
    assert store.tables_present([execs.TABLE], True) == set()


# -- the rules over the rows, on both stores ---------------------------------------------------


def test_an_exec_is_claimed_exactly_once_and_only_by_its_member(store, paneless):
    m1, m2 = paneless["m1"], paneless["m2"]
    with pytest.raises(Conflict):  # no pane yet
        execs.create(store, m1, "true")
    store.execute("UPDATE member_placements SET mux_pane_id = '%7' WHERE member_id = ?", (m1,))
    record = execs.create(store, m1, "echo hi")
    assert record["state"] == "created" and record["director_id"] == paneless["director"]
    with pytest.raises(Conflict, match="is for member"):
        execs.claim(store, record["exec_id"], m2, "h:1:1")
    claimed = execs.claim(store, record["exec_id"], m1, "h:1:1")
    assert claimed["state"] == "running" and claimed["dispatched_at"] is not None
    with pytest.raises(Conflict, match="already started"):
        execs.claim(store, record["exec_id"], m1, "h:2:2")
    assert execs.give_up(store, record["exec_id"], execs.NEVER_STARTED, "x") is None  # it started
    ended = execs.finish(store, record["exec_id"], 130)
    assert (ended["outcome"], ended["exit_status"]) == ("finished", 130)
    assert execs.finish(store, record["exec_id"], 0)["exit_status"] == 130  # the first word stands
    assert execs.give_up(store, record["exec_id"], execs.VANISHED, "x") is None
    [notice] = [m for m in notices.annotate(store, messages.poll(store, paneless["director"])) if m.get("kind")]
    assert notice["kind"] == "exec_finished" and notice["notice"]["subject"] == f"exec:{record['exec_id']}"
    assert "exit status 130 (killed by SIGINT)" in notice["text"]
    with pytest.raises(NotFound):
        execs.get(store, 999)


def test_exec_run_outside_the_members_pane_runs_nothing(cli, store, paneless, env, tmp_path):
    m1 = paneless["m1"]
    store.execute("UPDATE member_placements SET mux_pane_id = '%7' WHERE member_id = ?", (m1,))
    proof = tmp_path / "ran"
    record = execs.create(store, m1, f"touch {proof}")
    for extra in ({}, {"TMUX_PANE": "%8"}, {"CAFLEET_MEMBER_ID": str(paneless["m2"])}):
        done = cli("member", "exec-run", str(record["exec_id"]), environ=dict(env, **extra))
        assert done.code == 1, (extra, done)
        assert done.err.startswith(f"Error: exec {record['exec_id']} ") and len(done.err.splitlines()) == 1
        assert "nothing was run" in done.err
    assert not proof.exists()
    assert execs.get(store, record["exec_id"])["state"] == "created"


def _settings(env, db_path, **extra):
    from cafleet.config import Settings

    return Settings(dict(env, **extra), db_path)


def test_dispatched_but_never_started_and_vanished_are_told_to_the_director(store, paneless, env, db_path):
    from cafleet.delivery.execs import Watcher

    m1, m2 = paneless["m1"], paneless["m2"]
    for member in (m1, m2):
        store.execute("UPDATE member_placements SET mux_pane_id = '%7' WHERE member_id = ?", (member,))
    never = execs.create(store, m1, "true")
    execs.mark_dispatched(store, never["exec_id"])
    gone = execs.create(store, m2, "sleep 100")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    import socket

    execs.claim(store, gone["exec_id"], m2, f"{socket.gethostname()}:{dead.pid}:1")
    watcher = Watcher(store, _settings(env, db_path, CAFLEET_EXEC_START_AFTER="0"), paneless["fleet"])
    watcher.round()
    assert execs.get(store, never["exec_id"])["outcome"] == "never_started"
    assert execs.get(store, gone["exec_id"])["outcome"] == "vanished"
    kinds = sorted(
        m["kind"] for m in notices.annotate(store, messages.poll(store, paneless["director"])) if m.get("kind")
    )
    assert kinds == ["exec_never_started", "exec_vanished"]
    watcher.round()  # once each
    assert len(messages.poll(store, paneless["director"])) == 2
    assert execs.in_flight(store, paneless["fleet"]) == []


def test_a_runner_on_another_host_or_alive_never_counts_as_vanished():
    from cafleet.delivery.execs import runner_identity, vanished

    assert not vanished(runner_identity())
    assert not vanished(f"another-host-{os.getpid()}:1:1")
    assert not vanished(None)


# -- setup never pre-approves it ------------------------------------------------------------


EXEC_COMMANDS = (
    "cafleet member exec 3 'rm -rf build'",
    "cafleet member exec 3 --file x.sh --wait",
    "cafleet member exec-run 1",
)


@pytest.mark.stores("sqlite")
def test_setup_never_pre_approves_member_exec_for_any_agent(cli, env):
    """It carries an arbitrary command: a member must never be able to run it unasked, so
    neither codex's rules file nor opencode's agent preset installed by `setup` allows it, and
    claude members get no allow rule for it (while each still allows `cafleet message`)."""
    import re
    from pathlib import Path

    from cafleet.agents import backends, permissions

    assert cli("setup").code == 0
    home = Path(env["HOME"])
    rules = home / ".codex/rules/cafleet.rules"
    allowed = [p for p, decision, _ in permissions._prefix_rules(rules, rules.read_text()) if decision == "allow"]
    assert allowed, "the rules file allows `cafleet message`"
    for command in EXEC_COMMANDS:
        assert not any(permissions._codex_pattern_matches(p, command) for p in allowed), command
    assert any(permissions._codex_pattern_matches(p, "cafleet message poll 3") for p in allowed)

    preset = (home / ".opencode/agents/cafleet.md").read_text()
    front = preset.split("---")[1]
    entries = re.findall(r'^\s+"([^"]+)":\s*(allow|ask|deny)\s*$', front, re.M)
    assert entries
    for command in EXEC_COMMANDS:
        assert not [
            p for p, action in entries if action == "allow" and permissions._opencode_matches("bash", p, command)
        ]
    assert [
        p
        for p, action in entries
        if action == "allow" and permissions._opencode_matches("bash", p, "cafleet message ack 7")
    ]

    for command in EXEC_COMMANDS:
        assert not any(permissions._claude_rule_matches(rule, command) for rule in backends.CLAUDE_ALLOWED_TOOLS)
    assert any(
        permissions._claude_rule_matches(rule, "cafleet message poll 3") for rule in backends.CLAUDE_ALLOWED_TOOLS
    )


def test_recorded_shell_mode_screens_show_the_line_where_the_dispatch_looks_for_it():
    """tests/fixtures/exec-screens: each pinned agent's screen with the line typed in its `!`
    mode (each draws it its own way: claude and codex a `!` prompt, opencode without the `!`)
    and after the run. The dispatch presses Enter once the rest of the line shows on the last
    rows, never into a dialog."""
    from pathlib import Path

    from cafleet.delivery.keystrokes import screen, submit

    folders = sorted((Path(__file__).resolve().parent / "fixtures" / "exec-screens").iterdir())
    assert {f.name.rsplit("-", 1)[0] for f in folders} == {"claude", "codex", "opencode"}
    for folder in folders:
        agent = folder.name.rsplit("-", 1)[0]
        typed = (folder / "exec_typed.txt").read_text(encoding="utf-8")
        rows = [row for row in screen.screen_lines(typed) if row.strip()][-submit.SHELL_ROWS :]
        assert any("cafleet member exec-run 1" in row for row in rows), folder.name
        assert screen.classify(agent, typed) != screen.PaneState.AWAITING_USER
        ran = (folder / "exec_ran.txt").read_text(encoding="utf-8")
        assert "exec-output-7f3a" in ran and "[cafleet exec 1 ended: exit status 4]" in ran, folder.name
