"""A member on another host outlives its host's tmux server (docs/delivery.md, "A fleet
outlives its panes"): after cafleet's ``tmux -L cafleet`` server on that host dies, the
member reads dead, a message sent to it is stored and owed, and ``cafleet member revive``
starts it again in a new session on that host's server, its placement moved there; the
owed preview then reaches it once.

"Another host" is the suite's real ``sshd`` on 127.0.0.1 (tests/support/sshd.py): its
remote side has a HOME and a tmux socket directory of its own, so the ``-L cafleet``
server there is this test's alone, and it is killed by the pid that server reports. The
Director sits in a private local tmux server whose pane stays alive throughout, so revive
(not restore) is the command. The keeper is on: it delivers what was owed once the member
is back. Every wait is bounded (``wait_for``).

A tmux server started again on the same socket numbers its sessions and panes from
``$0``/``%0`` again, so the first pane opened there can carry the very ids of the dead
placement it replaces; the first test is that case (one member on the host), the second
revives two members in an order where the ids differ.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import os
import signal

import pytest

from cafleet.mux.ssh import split_session
from tests.support.keeper import end_every_keeper, kept_fleet_with_host
from tests.support.pane_fleet import preview_line
from tests.support.remote_fleet import create_remote, remote_panes
from tests.support.tmux_fixtures import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.tmux]


@pytest.fixture
def remote(env, tmp_path, monkeypatch):
    """(fleet, host): a live local fleet with its keeper on, and a reachable host for its members."""
    with kept_fleet_with_host(env, tmp_path, monkeypatch) as (fleet, host):
        yield fleet, host


def remote_server_pid(host) -> int:
    """The pid of cafleet's tmux server on ``host``: the one on this test's own socket
    (the host's TMUX_TMPDIR, under the test's short directory), checked before it is used."""
    pid, socket = host.remote_tmux("display-message", "-p", "#{pid}\t#{socket_path}").strip().split("\t")
    assert socket.startswith(str(host.remote_tmux_tmpdir) + os.sep), socket
    return int(pid)


def kill_remote_server(host) -> int:
    """The host's tmux server dies (as at a reboot or an OOM kill there): SIGKILL by its pid."""
    pid = remote_server_pid(host)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _gone(pid), what=f"the host's tmux server {pid} to die")
    return pid


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def states(fleet) -> dict[int, tuple[str, str]]:
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state", "--json")
    assert listed.code == 0, listed
    return {r["member_id"]: (r["state"], r["state_detail"]) for r in listed.json() if r["kind"] == "member"}


def remote_member(fleet, host, name: str) -> tuple[int, dict]:
    """A stand-in created on ``host`` and ready: (member id, its placement)."""
    created = create_remote(fleet, host, name, "--json")
    assert created.code == 0, created
    member_id = created.json()["member_id"]
    fleet.wait_ready(member_id)
    return member_id, placement_of(fleet, member_id)


def placement_of(fleet, member_id: int) -> dict:
    shown = fleet.cafleet("member", "show", str(member_id), "--json")
    assert shown.code == 0, shown
    return shown.json()["placement"]


def send_while_down(fleet, member_id: int) -> dict:
    """A send to a dead member: stored and owed, never a failure."""
    sent = fleet.send(fleet.director, member_id, f"while your host's tmux was down, {member_id}", "--json")
    assert sent.code == 0, sent
    message = sent.json()
    assert f"message {message['message_id']} is stored but member {member_id} was not notified" in sent.err, sent
    assert fleet.notified_at(message["message_id"]) is None
    assert fleet.submits(member_id) == []
    return message


def person(fleet) -> dict:
    """The environment of the person's shell: outside every pane (the Director's pane is
    alive, so `member revive` is the command, and the person may run it)."""
    return {k: v for k, v in fleet.environ.items() if k not in ("TMUX", "TMUX_PANE")}


def revive_on_host(fleet, host, member_id: int, old: dict, killed: int) -> dict:
    """``member revive`` for a member whose host's tmux died: restored, its placement moved
    to a pane of the host's new ``-L cafleet`` server; returns the new placement."""
    revived = fleet.cafleet("member", "revive", str(member_id), "--json", environ=person(fleet))
    assert revived.code == 0, revived
    outcome = revived.json()
    assert (outcome["member_id"], outcome["outcome"]) == (member_id, "restored"), outcome
    placement = placement_of(fleet, member_id)
    assert placement["session"].startswith("ssh://"), placement
    where, session = split_session(placement["session"])
    assert where == host.alias and placement["pane_id"] == outcome["pane_id"], (placement, outcome)
    assert remote_server_pid(host) != killed  # a new server on the host's same socket...
    assert session.endswith("@" + host.remote_tmux("display-message", "-p", "#{socket_path}").strip())
    assert placement["pane_id"] in remote_panes(host), (placement, remote_panes(host))  # ...holds its pane
    assert placement["identity"] != old["identity"], (placement, old)
    return placement


def delivered_once(fleet, member_id: int, message: dict) -> None:
    """The member reads alive and the preview owed since it was down reached it, once."""
    wait_for(lambda: states(fleet)[member_id][0] == "alive", timeout=30, what=f"member {member_id} to read alive")
    line = preview_line(message)
    wait_for(lambda: line in fleet.submits(member_id), timeout=30, what=f"the owed preview to member {member_id}")
    wait_for(lambda: fleet.notified_at(message["message_id"]), timeout=20, what="the preview to be recorded")
    assert fleet.submits(member_id).count(line) == 1


def refused_again(fleet, member_id: int, placement: dict) -> None:
    again = fleet.cafleet("member", "revive", str(member_id), "--json", environ=person(fleet))
    assert again.code != 0 and len(again.err.strip().splitlines()) == 1, again
    assert f"member {member_id} is alive in pane {placement['pane_id']}" in again.err, again


def test_a_member_whose_hosts_tmux_died_is_revived_on_that_host_and_gets_what_was_owed_once(remote):
    fleet, host = remote
    member_id, old = remote_member(fleet, host, "far")
    killed = kill_remote_server(host)
    wait_for(lambda: states(fleet)[member_id][0] == "dead", timeout=20, what="the member to read dead")
    message = send_while_down(fleet, member_id)

    placement = revive_on_host(fleet, host, member_id, old, killed)
    delivered_once(fleet, member_id, message)
    refused_again(fleet, member_id, placement)
    assert remote_panes(host).keys() == {placement["pane_id"]}
    end_every_keeper(fleet)
    assert fleet.submits(member_id).count(preview_line(message)) == 1


def test_two_members_whose_hosts_tmux_died_are_revived_there_and_get_what_was_owed_once(remote):
    fleet, host = remote
    first, first_old = remote_member(fleet, host, "first")
    second, second_old = remote_member(fleet, host, "second")
    assert (first_old["pane_id"], second_old["pane_id"]) == ("%0", "%1"), (first_old, second_old)
    killed = kill_remote_server(host)
    wait_for(lambda: {states(fleet)[m][0] for m in (first, second)} == {"dead"}, timeout=20, what="both dead")
    messages = {member_id: send_while_down(fleet, member_id) for member_id in (first, second)}

    # the second first: the restarted server's first pane (%0) is not its old one (%1)
    placements = {second: revive_on_host(fleet, host, second, second_old, killed)}
    assert placements[second]["pane_id"] == "%0"
    # the first's old placement ($0, %0) now names the second's live pane: still dead, by its identity
    assert states(fleet)[first][0] == "dead", states(fleet)
    placements[first] = revive_on_host(fleet, host, first, first_old, killed)
    assert placements[first]["pane_id"] == "%1"

    for member_id, message in messages.items():
        delivered_once(fleet, member_id, message)
        refused_again(fleet, member_id, placements[member_id])
    assert remote_panes(host).keys() == {"%0", "%1"}
    end_every_keeper(fleet)
    for member_id, message in messages.items():
        assert fleet.submits(member_id).count(preview_line(message)) == 1
