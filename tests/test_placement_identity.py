"""Placement identity: a pane id that now names another pane is never typed into or closed.

tmux numbers panes from ``%0`` again when a server restarts on the same socket, and the
herdr stand-in numbers them from ``w1:p1``. Each test builds a fleet in a real private
server, stops that server and starts a new one on the SAME socket whose panes run plain
shells (a user's), then checks what the shells ran (marker files from ``$(touch X)`` and
``; touch Y`` bodies), what their screens show and which panes still exist.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from cafleet.clock import to_epoch
from cafleet.store.engines import open_store
from cafleet.web import api
from tests.support import herdr_standin
from tests.support.pane_fleet import herdr_fleet, tmux_fleet
from tests.support.tmux_fixtures import running_tmux_server, wait_for
from tests.support.watch_stream import Stream

PROMPT = "user$ "


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


@pytest.fixture
def herdr(env, tmp_path, monkeypatch):
    with herdr_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


def user_shell(workdir: Path) -> list[str]:
    """A user's interactive shell: anything typed and entered into it runs."""
    shell = shutil.which("bash")
    if shell:
        return ["env", f"PS1={PROMPT}", "HISTFILE=/dev/null", shell, "--noprofile", "--norc", "-i"]
    return ["env", f"PS1={PROMPT}", "sh", "-i"]


class RestartedTmux:
    """A new tmux server on the old server's socket, its panes running user shells."""

    def __init__(self, old_server, workdir: Path, panes: int) -> None:
        self.socket = old_server.socket
        self.env = old_server.env
        old_server.kill()
        shell = user_shell(workdir)
        self.run("new-session", "-d", "-s", "user", "-x", "200", "-y", "50", "-c", str(workdir), "--", *shell)
        self.pid = int(self.run("display-message", "-p", "#{pid}").strip())
        for _ in range(panes - 1):
            self.run("new-window", "-d", "-t", "user:", "-c", str(workdir), "--", *shell)
        for pane in self.panes():
            wait_for(lambda pane=pane: PROMPT.strip() in self.screen(pane), what=f"the shell prompt in {pane}")

    def run(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-f", "/dev/null", "-S", self.socket, *args], capture_output=True, env=self.env, timeout=10
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.decode("utf-8", "replace")

    def panes(self) -> list[str]:
        return sorted(self.run("list-panes", "-a", "-F", "#{pane_id}").split(), key=lambda p: int(p[1:]))

    def screen(self, pane: str) -> str:
        return self.run("capture-pane", "-p", "-t", pane)

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, env=self.env, timeout=10)


@pytest.fixture
def markers(tmp_path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


def hostile(markers: Path) -> str:
    """A body that runs two commands if a shell ever receives it as a command line."""
    return f"$(touch {markers}/X) ; touch {markers}/Y"


def restart(fleet, markers: Path, panes: int) -> RestartedTmux:
    return RestartedTmux(fleet.server, markers.parent, panes)


def test_tmux_restart_send_types_nothing_and_keeps_the_message_owed(fleet, markers):
    alice = fleet.create("alice")
    assert alice["pane_id"] == "%1"
    server = restart(fleet, markers, panes=3)
    try:
        assert server.panes() == ["%0", "%1", "%2"]  # the old ids now name the user's shells
        before = {pane: server.screen(pane) for pane in server.panes()}

        sent = fleet.send(fleet.director, alice["member_id"], hostile(markers), "--json")
        assert sent.code == 0, sent
        assert sent.json()["notified"] is False
        assert "Warning: message 1 is stored but member 2 was not notified: tmux pane %1 is stale" in sent.err
        assert "its tmux server was restarted" in sent.err and "Do not resend." in sent.err
        assert fleet.notified_at(1) is None

        waited = fleet.cafleet("message", "wait", str(fleet.director), "--timeout", "0.5", "--json")
        assert (waited.code, waited.out) == (3, ""), waited  # the wait itself timed out: nothing for the Director
        assert "Warning: message 1 is stored but member 2 was not notified: tmux pane %1 is stale" in waited.err

        again = fleet.send(fleet.director, alice["member_id"], "second", "--json")
        assert again.json()["notified"] is False and "is stale" in again.err

        # Nothing was typed and nothing ran: the screens are unchanged and no marker exists.
        assert {pane: server.screen(pane) for pane in server.panes()} == before
        assert sorted(p.name for p in markers.iterdir()) == []
        assert fleet.query("SELECT message_id, notified_at FROM messages ORDER BY message_id") == [(1, None), (2, None)]
        polled = fleet.cafleet("message", "poll", str(alice["member_id"]), "--json").json()
        assert [r["message_id"] for r in polled] == [2, 1]  # still owed, still readable
    finally:
        server.kill()


def test_tmux_restart_capture_prompt_and_state_report_stale(fleet, markers):
    alice = fleet.create("alice")["member_id"]
    server = restart(fleet, markers, panes=2)
    try:
        before = server.screen("%1")
        captured = fleet.cafleet("member", "capture", str(alice))
        assert captured.code != 0 and captured.out == ""
        assert captured.err.startswith("Error: tmux pane %1 is stale: its tmux server was restarted")
        assert captured.err.count("\n") == 1

        prompted = fleet.cafleet("member", "prompt", str(alice), f"echo hi; touch {markers}/P")
        assert prompted.code != 0 and "is stale" in prompted.err

        listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state", "--json")
        assert listed.code == 0, listed
        row = next(r for r in listed.json() if r["member_id"] == alice)
        assert row["state"] == "dead" and "is stale" in row["state_detail"]
        text = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state")
        assert [line.split()[-1] for line in text.out.splitlines()[1:]] == ["director", "dead"]

        store = open_store(fleet.db)  # the WebUI roster
        try:
            view = api.fleet_view(store, fleet.fleet_id, api.member_states(store, fleet.fleet_id))
        finally:
            store.close()
        shown = next(m for m in view["members"] if m["member_id"] == alice)
        assert shown["state"] == "dead" and "tmux pane %1 is stale" in shown["state_detail"]

        stream = Stream(fleet.environ, fleet.fleet_id, "--interval", "0.3", "--idle-after", "600")
        try:
            dead = stream.wait_event(lambda e: e["event"] == "dead" and e["member_id"] == alice)
            assert dead["detail"].startswith("tmux pane %1 is stale: its tmux server was restarted")
            assert dead["command"] == f"cafleet member delete {alice}"
        finally:
            assert stream.stop() == 0

        assert server.screen("%1") == before
        assert list(markers.iterdir()) == []
    finally:
        server.kill()


def test_tmux_restart_fleet_and_member_delete_close_no_new_pane(fleet, markers):
    fleet.create("alice")
    bob = fleet.create("bob")["member_id"]
    server = restart(fleet, markers, panes=3)
    try:
        assert server.panes() == ["%0", "%1", "%2"]
        deleted = fleet.cafleet("member", "delete", str(bob), "--json")
        assert deleted.code == 0, deleted
        assert deleted.json()["pane_status"].startswith("stale, left open (tmux pane %2 is stale")
        assert server.panes() == ["%0", "%1", "%2"]
        assert fleet.member_count("deregistered") == 1

        dropped = fleet.cafleet("fleet", "delete", str(fleet.fleet_id))
        assert dropped.code == 0, dropped
        assert "stale" in dropped.out
        assert server.panes() == ["%0", "%1", "%2"]  # the new server's panes all survive
        assert fleet.member_count("active") == 0
        assert list(markers.iterdir()) == []
    finally:
        server.kill()


def test_member_create_refused_from_a_restarted_servers_pane_with_the_directors_id(fleet, markers):
    server = restart(fleet, markers, panes=1)
    try:
        caller = dict(fleet.environ, TMUX=f"{server.socket},{server.pid},0", TMUX_PANE="%0")
        result = fleet.cafleet(
            "member",
            "create",
            "--fleet-id",
            str(fleet.fleet_id),
            "--name",
            "eve",
            "--description",
            "x",
            "--coding-agent",
            "standin",
            "Hi",
            environ=caller,
        )
        assert result.code != 0
        assert result.err.startswith(f"Error: only fleet {fleet.fleet_id}'s Director (pane %0) can create members")
        assert "of another server or an earlier pane with that id" in result.err
        assert server.panes() == ["%0"]
        assert fleet.member_count("active") == 1
    finally:
        server.kill()


def test_member_create_refused_from_pane_0_of_another_tmux_server(fleet, env, markers):
    assert fleet.director_pane == "%0"
    with running_tmux_server(env, command=user_shell(markers.parent)) as other:
        assert other.main_pane() == "%0"
        caller = dict(fleet.environ, **other.environ_for("%0"))
        result = fleet.cafleet(
            "member",
            "create",
            "--fleet-id",
            str(fleet.fleet_id),
            "--name",
            "eve",
            "--description",
            "x",
            "--coding-agent",
            "standin",
            "Hi",
            environ=caller,
        )
        assert result.code != 0
        assert "can create members; this command runs in pane %0 of another server" in result.err
        assert other.run("list-panes", "-a", "-F", "#{pane_id}").split() == ["%0"]
        assert fleet.member_count("active") == 1
    # The Director itself still can.
    assert fleet.create("alice")["member_id"] == 2


def test_identity_is_recorded_in_the_pane_column_and_legacy_rows_still_deliver(fleet):
    alice = fleet.create("alice")
    stored = fleet.query("SELECT member_id, mux_pane_id FROM member_placements ORDER BY member_id")
    pid, start = fleet.server.run("display-message", "-p", "#{pid} #{start_time}").split()
    pane_pid = fleet.server.run("display-message", "-p", "-t", alice["pane_id"], "#{pane_pid}").strip()
    director_pid = fleet.server.run("display-message", "-p", "-t", "%0", "#{pane_pid}").strip()
    assert stored == [(1, f"%0 {pid}:{start}:{director_pid}"), (2, f"%1 {pid}:{start}:{pane_pid}")]
    shown = fleet.cafleet("member", "show", "2", "--json").json()["placement"]
    assert (shown["pane_id"], shown["identity"]) == ("%1", f"{pid}:{start}:{pane_pid}")

    # A placement recorded before identities existed is checked by its pane id alone.
    conn = sqlite3.connect(fleet.db)
    with conn:
        conn.execute("UPDATE member_placements SET mux_pane_id = '%1' WHERE member_id = 2")
    conn.close()
    assert fleet.cafleet("member", "show", "2", "--json").json()["placement"]["identity"] is None
    sent = fleet.send(fleet.director, alice["member_id"], "legacy still works", "--json")
    assert (sent.code, sent.err, sent.json()["notified"]) == (0, "", True)
    assert len(fleet.submits(alice["member_id"])) == 1


def test_legacy_placement_is_stale_once_its_server_started_after_it_was_recorded(fleet, markers):
    """A placement without identity (recorded by an earlier cafleet) is still refused after
    a restart: the new tmux server started after the placement's ``created_at``."""
    alice = fleet.create("alice")
    conn = sqlite3.connect(fleet.db)
    with conn:
        conn.execute("UPDATE member_placements SET mux_pane_id = substr(mux_pane_id, 1, instr(mux_pane_id, ' ') - 1)")
    recorded = conn.execute("SELECT MAX(created_at) FROM member_placements").fetchone()[0]
    conn.close()
    assert [p for (p,) in fleet.query("SELECT mux_pane_id FROM member_placements ORDER BY member_id")] == ["%0", "%1"]
    wait_for(lambda: int(time.time()) > int(to_epoch(recorded)), what="the next second")
    server = restart(fleet, markers, panes=2)
    try:
        before = server.screen("%1")
        sent = fleet.send(fleet.director, alice["member_id"], hostile(markers), "--json")
        assert sent.json()["notified"] is False
        assert "tmux pane %1 is stale: its tmux server was started after this placement was recorded" in sent.err
        caller = dict(fleet.environ, TMUX=f"{server.socket},{server.pid},0", TMUX_PANE="%0")
        refused = fleet.cafleet(
            "member",
            "create",
            "--fleet-id",
            str(fleet.fleet_id),
            "--name",
            "eve",
            "--description",
            "x",
            "--coding-agent",
            "standin",
            "Hi",
            environ=caller,
        )
        assert refused.code != 0 and "can create members" in refused.err
        dropped = fleet.cafleet("fleet", "delete", str(fleet.fleet_id))
        assert dropped.code == 0 and "stale" in dropped.out
        assert server.panes() == ["%0", "%1"] and server.screen("%1") == before
        assert list(markers.iterdir()) == []
    finally:
        server.kill()


def test_a_replaced_pane_program_is_stale_too(fleet):
    """Same server, same pane id, another process: ``respawn-pane`` replaced the agent."""
    alice = fleet.create("alice")
    fleet.server.run("respawn-pane", "-k", "-t", alice["pane_id"], "sh")
    sent = fleet.send(fleet.director, alice["member_id"], "hello", "--json")
    assert sent.json()["notified"] is False
    assert "is stale: the program cafleet started there was replaced" in sent.err
    deleted = fleet.cafleet("member", "delete", str(alice["member_id"]), "--json")
    assert deleted.json()["pane_status"].startswith("stale, left open")
    assert alice["pane_id"] in fleet.server.run("list-panes", "-a", "-F", "#{pane_id}").split()


# --- herdr ----------------------------------------------------------------------------------


def test_herdr_restart_send_and_fleet_delete_touch_nothing(herdr, markers):
    alice = herdr.create("alice")
    assert alice["pane_id"] == "w1:p2"
    server = herdr.server
    server.kill()
    herdr_standin.start_server(server.socket, shell=user_shell(markers.parent), env=server.env, cwd=str(markers.parent))
    split = server.run("pane", "split", "--pane", "w1:p1", "--direction", "down", "--no-focus")
    assert split.returncode == 0, split.stderr
    for pane in ("w1:p1", "w1:p2"):
        wait_for(
            lambda pane=pane: PROMPT.strip() in server.tmux("capture-pane", "-p", "-t", server.tmux_pane(pane)),
            what=f"the shell in {pane}",
        )
    before = server.tmux("capture-pane", "-p", "-t", server.tmux_pane("w1:p2"))

    sent = herdr.send(herdr.director, alice["member_id"], hostile(markers), "--json")
    assert sent.code == 0, sent
    assert sent.json()["notified"] is False
    assert "herdr pane w1:p2 is stale" in sent.err
    listed = herdr.cafleet("member", "list", str(herdr.fleet_id), "--state", "--json").json()
    assert [(r["state"], "is stale" in r["state_detail"]) for r in listed if r["member_id"] == alice["member_id"]] == [
        ("dead", True)
    ]

    dropped = herdr.cafleet("fleet", "delete", str(herdr.fleet_id))
    assert dropped.code == 0, dropped
    assert "stale" in dropped.out
    assert set(herdr_standin_panes(server)) == {"w1:p1", "w1:p2"}
    assert server.tmux("capture-pane", "-p", "-t", server.tmux_pane("w1:p2")) == before
    assert list(markers.iterdir()) == []


def herdr_standin_panes(server) -> list[str]:
    import json

    listed = server.run("pane", "list")
    assert listed.returncode == 0, listed.stderr
    return [p["pane_id"] for p in json.loads(listed.stdout)["result"]["panes"]]
