"""The keeper revives a member whose agent died, in a fleet that opted in (docs/delivery.md,
"The keeper revives a member"): `fleet create --revive` or `fleet auto-revive`, at most N
revivals of a member an hour with back-off, a notice to the Director each time and when it
gives up, and `member revive` starting the count again.

The counting rule is pure logic and is tested as such; the rest runs on a real private tmux
server with the stand-in agent, the real command line and the real keeper (its notices looked
for every 0.3 s instead of every 15), on both stores. The agent is killed with SIGKILL (its
pane closes with it) or exits by itself (`/exit`, the stand-in's own command).
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # the tests on a fleet run on both stores (tests/conftest.py)

import os
import signal

import pytest

from cafleet.broker import revivals
from cafleet.delivery.supervision.revival import BACKOFF, GIVEN_UP, HOUR, due
from tests.support.keeper import end_every_keeper, keeper_on
from tests.support.pane_fleet import PaneFleet, tmux_fleet
from tests.support.tmux_fixtures import wait_for

FAST = {"CAFLEET_NOTICE_INTERVAL": "0.3"}
REVIVE_BOUND = 30.0  # the keeper noticing a death and starting the member again; bounds a failure only


# -- the count, as pure logic ---------------------------------------------------------------


def test_the_first_revival_is_at_once_the_next_ones_back_off_and_the_hours_limit_gives_up():
    now = 10_000.0
    assert due([], 3, now) == "revive"
    one = [(now - 1, revivals.KEEPER)]
    assert due(one, 3, now) == now - 1 + BACKOFF  # the second: BACKOFF after the first
    assert due(one, 3, now - 1 + BACKOFF) == "revive"
    two = [(now - 100, revivals.KEEPER), (now - 10, revivals.KEEPER)]
    assert due(two, 3, now) == now - 10 + 2 * BACKOFF  # the third: twice that after the second
    three = [*two, (now - 1, revivals.KEEPER)]
    assert due(three, 3, now) == "give up"  # three in the hour: no fourth
    assert due(three, 4, now) == now - 1 + 4 * BACKOFF
    assert due([*three, (now, revivals.GAVE_UP)], 3, now + 5 * HOUR) == GIVEN_UP  # until `member revive`
    # tries older than an hour do not count
    old = [(now - HOUR - 5, revivals.KEEPER), (now - HOUR - 1, revivals.KEEPER), (now - HOUR, revivals.KEEPER)]
    assert due(old, 3, now) == "revive"


# -- a real fleet ---------------------------------------------------------------------------


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    keeper_on(env, monkeypatch)
    for name, value in FAST.items():
        env[name] = value
        monkeypatch.setenv(name, value)
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        try:
            yield pane_fleet
        finally:
            end_every_keeper(pane_fleet)


def notices(fleet: PaneFleet, kind: str) -> list[dict]:
    """The Director's pending notices of ``kind`` (peeked: nothing is ACKed)."""
    polled = fleet.cafleet("message", "poll", str(fleet.director), "--json")
    assert polled.code == 0, polled
    return [r for r in polled.json() if r.get("kind") == kind]


def pane_of(fleet: PaneFleet, member_id: int) -> str:
    shown = fleet.cafleet("member", "show", str(member_id), "--json")
    assert shown.code == 0, shown
    return shown.json()["placement"]["pane_id"]


def kill_agent(fleet: PaneFleet, pane: str) -> None:
    """SIGKILL the pane's process (the stand-in agent): the pane closes with it."""
    pid = int(fleet.server.run("display-message", "-p", "-t", pane, "#{pane_pid}"))
    os.kill(pid, signal.SIGKILL)


def revived_from(fleet: PaneFleet, member_id: int, old_pane: str) -> str:
    """Wait for the keeper to place ``member_id`` in a pane other than ``old_pane`` and for
    its stand-in to draw its input line there; the new pane."""
    new = wait_for(
        lambda: (pane := pane_of(fleet, member_id)) != old_pane and pane,
        timeout=REVIVE_BOUND,
        interval=0.1,
        what=f"the keeper to revive member {member_id}",
    )
    fleet.wait_ready(member_id)
    return new


def test_the_keeper_revives_a_dead_member_tells_the_director_and_gives_up_at_the_limit(fleet):
    member = fleet.create("worker")
    member_id, first = member["member_id"], member["pane_id"]
    shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json")
    assert shown.json()["revive_per_hour"] is None, shown  # opted out by default
    # a member may not change it; the Director may
    as_member = dict(fleet.environ, TMUX_PANE=first)
    refused = fleet.cafleet("fleet", "auto-revive", str(fleet.fleet_id), "--per-hour", "1", environ=as_member)
    assert refused.code != 0 and refused.err.count("\n") == 1, refused
    assert fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json").json()["revive_per_hour"] is None
    turned = fleet.cafleet("fleet", "auto-revive", str(fleet.fleet_id), "--per-hour", "1", "--json")
    assert turned.code == 0 and turned.json()["revive_per_hour"] == 1, turned

    kill_agent(fleet, first)
    second = revived_from(fleet, member_id, first)
    said = wait_for(lambda: notices(fleet, "revived"), timeout=REVIVE_BOUND, what="the revived notice")
    assert len(said) == 1 and said[0]["notice"]["member_id"] == member_id, said
    assert f"Member {member_id} (worker) died" in said[0]["text"] and "restored in pane" in said[0]["text"], said

    # dead again with the hour's one revival spent: given up, said once, left dead
    kill_agent(fleet, second)
    gave_up = wait_for(lambda: notices(fleet, "not_revived"), timeout=REVIVE_BOUND, what="the give-up notice")
    assert len(gave_up) == 1 and f"`cafleet member revive {member_id}`" in gave_up[0]["text"], gave_up
    assert pane_of(fleet, member_id) == second
    assert len(notices(fleet, "revived")) == 1 and len(notices(fleet, "not_revived")) == 1

    # the Director brings it back: the count starts again, and the keeper revives it next time
    by_hand = fleet.cafleet("member", "revive", str(member_id), "--json")
    assert by_hand.code == 0 and by_hand.json()["outcome"] == "restored", by_hand
    third = by_hand.json()["pane_id"]
    fleet.wait_ready(member_id)
    kill_agent(fleet, third)
    revived_from(fleet, member_id, third)
    wait_for(lambda: len(notices(fleet, "revived")) == 2, timeout=REVIVE_BOUND, what="a second revived notice")
    assert len(notices(fleet, "not_revived")) == 1


def test_a_fleet_created_with_revive_brings_back_an_agent_that_exited_and_keeps_its_messages(fleet):
    other = fleet.server.new_pane(["sh"])  # the second fleet's Director, in a pane of its own
    environ = dict(fleet.environ, **fleet.server.environ_for(other))
    created = fleet.cafleet(
        "fleet", "create", "--name", "again", "--coding-agent", "standin", "--revive", "--json", environ=environ
    )
    assert created.code == 0 and created.json()["revive_per_hour"] == revivals.DEFAULT_PER_HOUR, created
    fleet_id, director = created.json()["fleet_id"], created.json()["director_member_id"]
    try:
        made = fleet.cafleet(
            "member", "create", "--fleet-id", str(fleet_id), "--name", "quitter", "--description", "d",
            "--coding-agent", "standin", "--json", "Wait.", environ=environ,
        )  # fmt: skip
        assert made.code == 0, made
        member_id, pane = made.json()["member_id"], made.json()["pane_id"]
        fleet.wait_ready(member_id)
        sent = fleet.send(director, member_id, "before it quit", "--json", environ=environ)
        assert sent.code == 0, sent
        message_id = sent.json()["message_id"]
        fleet.server.run("send-keys", "-t", pane, "C-d")  # the agent ends by its own key
        new = revived_from(fleet, member_id, pane)
        assert new in fleet.server.run("list-panes", "-a", "-F", "#{pane_id}").split()
        # what was sent before is still its own, owed under its unchanged id
        shown = fleet.cafleet("message", "show", str(message_id), "--json", environ=environ)
        assert shown.code == 0 and shown.json()["to_member_id"] == member_id, shown
        assert shown.json()["status_state"] == "input_required", shown
    finally:
        fleet.cafleet("fleet", "delete", str(fleet_id), environ=environ)
