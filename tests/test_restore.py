"""A fleet outlives its panes (docs/delivery.md, "A fleet outlives its panes"): after its
tmux server dies, `cafleet fleet restore` from a new server's pane makes that pane the
Director's and starts every member again in a live pane, its id, messages and agent's
options kept; `cafleet member revive` does it for one member whose agent exited.

Real panes on private tmux servers, the real command line, the stand-in agent (and the
tests' fake claude, which records the command it was started with). The keeper is on: it
delivers what was owed once the members are back. Every wait is bounded (``wait_for``).
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import os
import signal

import pytest

from tests.support.keeper import end_every_keeper, keeper_on
from tests.support.pane_fleet import PaneFleet, preview_line, start, tmux_fleet
from tests.support.restart import kill_server, new_server
from tests.support.tmux_fixtures import wait_for


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    keeper_on(env, monkeypatch)
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        try:
            yield pane_fleet
        finally:
            end_every_keeper(pane_fleet)


@pytest.fixture
def held(tmp_path):
    from tests.support.pause import held_commands

    yield from held_commands(tmp_path)


def states(fleet: PaneFleet, environ=None) -> dict[int, tuple[str, str]]:
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state", "--json", environ=environ)
    assert listed.code == 0, listed
    return {r["member_id"]: (r["state"], r["state_detail"]) for r in listed.json() if r["kind"] == "member"}


def panes_of(server) -> list[str]:
    return server.run("list-panes", "-a", "-F", "#{pane_id}").split()


def test_a_fleet_whose_server_died_is_restored_from_a_new_pane_and_owed_messages_arrive_once(fleet, tmp_path):
    from contextlib import ExitStack

    one, two = fleet.create("one"), fleet.create("two")
    kill_server(fleet)
    # what was lost reads so, and a send says how to bring it back
    for member_id, (state, detail) in states(fleet).items():
        assert state == "dead", (member_id, state, detail)
    sent = fleet.send(fleet.director, one["member_id"], "while you were down", "--json")
    assert sent.code == 0, sent
    message_id = sent.json()["message_id"]
    assert f"cafleet fleet restore {fleet.fleet_id}" in sent.err, sent
    with ExitStack() as stack:
        environ = new_server(fleet, tmp_path, stack)
        restored = fleet.cafleet("fleet", "restore", str(fleet.fleet_id), "--json", environ=environ)
        assert restored.code == 0, restored
        outcomes = {r["member_id"]: r for r in restored.json()["members"]}
        assert outcomes[fleet.director]["outcome"] == "restored"
        assert {outcomes[m["member_id"]]["outcome"] for m in (one, two)} == {"restored"}, outcomes
        live = panes_of(fleet.new_server)
        assert {outcomes[m["member_id"]]["pane_id"] for m in (one, two)} <= set(live)
        wait_for(lambda: all(s == "alive" for s, _ in states(fleet, environ).values()), what="both members alive")
        # the message sent while the fleet was down reaches member one, once
        shown = fleet.cafleet("message", "show", str(message_id), "--json", environ=environ).json()
        wait_for(lambda: preview_line(shown) in fleet.submits(one["member_id"]), timeout=30, what="the owed preview")
        # a second run changes nothing
        again = fleet.cafleet("fleet", "restore", str(fleet.fleet_id), "--json", environ=environ)
        assert again.code == 0, again
        assert {r["outcome"] for r in again.json()["members"]} == {"running"}, again
        assert panes_of(fleet.new_server) == live
        assert fleet.submits(one["member_id"]).count(preview_line(shown)) == 1
        shown_director = fleet.cafleet("member", "show", str(fleet.director), "--json", environ=environ).json()
        assert shown_director["placement"]["pane_id"] == environ["TMUX_PANE"]
        end_every_keeper(fleet)


def test_restore_is_refused_from_a_members_pane_and_while_the_director_lives(fleet):
    one = fleet.create("one")
    member_env = dict(fleet.environ, TMUX_PANE=one["pane_id"])
    refused = fleet.cafleet("fleet", "restore", str(fleet.fleet_id), environ=member_env)
    assert refused.code != 0 and refused.err.count("\n") == 1, refused
    assert f"names member {one['member_id']} (its TMUX_PANE)" in refused.err, refused
    revive = fleet.cafleet("member", "revive", str(one["member_id"]), environ=member_env)  # Director only
    assert revive.code != 0 and "may run `cafleet member revive`" in revive.err, revive
    other = fleet.server.new_pane(["sh"])
    alive = fleet.cafleet("fleet", "restore", str(fleet.fleet_id), environ=dict(fleet.environ, TMUX_PANE=other))
    assert alive.code != 0 and "Director is alive in pane" in alive.err, alive
    # from the Director's own pane: nothing to do, said member by member
    own = fleet.cafleet("fleet", "restore", str(fleet.fleet_id), "--json")
    assert own.code == 0, own
    assert {r["outcome"] for r in own.json()["members"]} == {"running"}, own


def test_member_revive_starts_a_member_whose_agent_died_with_its_options(fleet):
    created = fleet.cafleet(
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        "c",
        "--description",
        "fake claude",
        "--coding-agent",
        "claude",
        "--model",
        "sonnet",
        "--effort",
        "high",
        "--json",
        "Work on {member_id}.",
    )
    assert created.code == 0, created
    member_id, pane_id = created.json()["member_id"], created.json()["pane_id"]
    argv_file = fleet.records_dir / f"argv-{member_id}.json"
    first = wait_for(lambda: argv_file.exists() and json.loads(argv_file.read_text()), what="the fake claude")
    session = first[first.index("--session-id") + 1]
    alive = fleet.cafleet("member", "revive", str(member_id))
    assert alive.code != 0 and f"member {member_id} is alive in pane {pane_id}" in alive.err, alive
    pid = int(fleet.server.run("display-message", "-p", "-t", pane_id, "#{pane_pid}"))
    argv_file.unlink()
    os.kill(pid, signal.SIGKILL)  # the agent dies; its pane closes with it
    wait_for(lambda: states(fleet)[member_id][0] == "dead", what="the member to read dead")
    revived = fleet.cafleet("member", "revive", str(member_id), "--json")
    assert revived.code == 0, revived
    assert revived.json()["outcome"] == "restored", revived
    again = wait_for(lambda: argv_file.exists() and json.loads(argv_file.read_text()), what="the fake claude again")
    assert again[again.index("--resume") + 1] == session, again
    assert again[again.index("--model") + 1] == "sonnet" and again[again.index("--effort") + 1] == "high", again
    assert "--session-id" not in again and "Work on" not in " ".join(again), again  # no second spawn prompt
    assert again[-1].startswith("[cafleet] Your pane was lost and cafleet started you again"), again
    assert states(fleet)[member_id][0] != "dead"


def test_a_restore_killed_after_opening_a_pane_run_again_leaves_one_pane_per_member(fleet, held, tmp_path):
    from contextlib import ExitStack

    one = fleet.create("one")
    kill_server(fleet)
    with ExitStack() as stack:
        environ = new_server(fleet, tmp_path, stack)
        proc, _release = held(environ, "restore.opened", "fleet", "restore", str(fleet.fleet_id))
        proc.kill()  # SIGKILL: the pane is open, its placement not recorded
        proc.communicate()
        assert len(panes_of(fleet.new_server)) == 2  # the Director's and the unrecorded one
        rerun = fleet.cafleet("fleet", "restore", str(fleet.fleet_id), "--json", environ=environ)
        assert rerun.code == 0, rerun
        outcome = {r["member_id"]: r for r in rerun.json()["members"]}[one["member_id"]]
        assert outcome["outcome"] == "restored" and "never recorded" in outcome["detail"], outcome
        assert sorted(panes_of(fleet.new_server)) == sorted([environ["TMUX_PANE"], outcome["pane_id"]])
        end_every_keeper(fleet)


def test_two_restores_at_once_leave_one_set_of_panes(fleet, tmp_path):
    from contextlib import ExitStack

    members = [fleet.create(name) for name in ("one", "two", "three")]
    kill_server(fleet)
    with ExitStack() as stack:
        environ = new_server(fleet, tmp_path, stack, same_socket=False)
        procs = [start(["fleet", "restore", str(fleet.fleet_id), "--json"], environ) for _ in range(2)]
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode == 0:
                results.append(json.loads(out))
            else:  # the loser of the Director's pane says so in one line
                assert b"recorded again by another command" in err or b"Director is alive" in err, err
        assert results
        restored = [r for result in results for r in result["members"] if r["outcome"] == "restored"]
        ids = [r["member_id"] for r in restored if r["member_id"] != fleet.director]
        assert sorted(ids) == sorted(m["member_id"] for m in members), results
        assert len(panes_of(fleet.new_server)) == 1 + len(members)
        end_every_keeper(fleet)
