"""Every stored value is hostile where it meets a multiplexer, SSH or a shell.

A database writer (on PostgreSQL, any member pane on any host holds the URL that can make
the change) rewrites a placement's columns with tmux format sequences (``#(...)`` runs a
shell command when tmux expands it) and shell metacharacters. Every command that reaches
the pane is then run against the damaged placement in a real private tmux server, and the
test checks that no marker file appeared (nothing ran), that no pane was closed, that the
member received no keystroke, and that each command said in one line that the placement
is damaged.

Runs on SQLite only: the checks live in the multiplexer layer, below the store, and the
PostgreSQL store hands the same strings to it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cafleet.broker import members
from cafleet.store.engines import open_store
from cafleet.web import screens
from tests.support.pane_fleet import herdr_fleet, tmux_fleet
from tests.support.tmux_fixtures import HerdrEnv
from tests.support.watch_stream import Stream


@pytest.fixture(params=["tmux", "herdr"])
def fleet(request, env, tmp_path, monkeypatch):
    """A live fleet on a real private tmux server, or on the herdr stand-in (whose CLI takes
    every stored id as an argument: an id that looks like an option must never reach it)."""
    with (tmux_fleet if request.param == "tmux" else herdr_fleet)(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


@pytest.fixture
def markers(tmp_path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


def attack(markers: Path, tag: str) -> str:
    """A tmux format that runs a command, and shell substitutions, each touching a marker."""
    return f"#(touch${{IFS}}{markers}/{tag}-fmt)$(touch {markers}/{tag}-sh)`touch {markers}/{tag}-bq`;touch${{IFS}}{markers}/{tag}-semi"


def placement_row(db: str, member_id: int) -> dict:
    conn = sqlite3.connect(db)
    try:
        row = conn.execute(
            "SELECT backend, mux_session, mux_window_id, mux_pane_id FROM member_placements WHERE member_id = ?",
            (member_id,),
        ).fetchone()
    finally:
        conn.close()
    return dict(zip(("backend", "mux_session", "mux_window_id", "mux_pane_id"), row))


def damage(db: str, member_id: int, column: str, value: str) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(f"UPDATE member_placements SET {column} = ? WHERE member_id = ?", (value, member_id))
        conn.commit()
    finally:
        conn.close()


# column -> how the stored value is rewritten: (stored row, attack text) -> new value
MEMBER_DAMAGE = {
    "identity": ("mux_pane_id", lambda row, bad: row["mux_pane_id"] + bad),
    "pane id": ("mux_pane_id", lambda row, bad: row["mux_pane_id"].replace(" ", bad + " ", 1)),
    "bare pane id": ("mux_pane_id", lambda row, bad: row["mux_pane_id"].split(" ")[0] + bad),
    "session id": ("mux_session", lambda row, bad: row["mux_session"].replace("@", bad + "@", 1)),
    "socket path": ("mux_session", lambda row, bad: row["mux_session"] + bad),
    "host": ("mux_session", lambda row, bad: f"ssh://localhost{bad}/" + row["mux_session"]),
    "host with a user": ("mux_session", lambda row, bad: "ssh://-oProxyCommand=x@localhost/" + row["mux_session"]),
    "backend": ("backend", lambda row, bad: "tmux" + bad),
    "pane id as an option": ("mux_pane_id", lambda row, bad: "--help " + row["mux_pane_id"].partition(" ")[2]),
}


def panes(fleet) -> list[str]:
    if isinstance(fleet.server, HerdrEnv):
        listed = fleet.server.run("pane", "list")
        assert listed.returncode == 0, listed.stderr
        return sorted(p["pane_id"] for p in json.loads(listed.stdout)["result"]["panes"])
    return sorted(fleet.server.run("list-panes", "-a", "-F", "#{pane_id}").split())


def says_damaged(text: str) -> bool:
    return "placement is damaged" in text


@pytest.mark.parametrize("case", sorted(MEMBER_DAMAGE))
def test_a_damaged_member_placement_runs_nothing_types_nothing_and_closes_nothing(fleet, markers, case):
    alice = fleet.create("alice")["member_id"]
    bob = fleet.create("bob")["member_id"]
    column, rewrite = MEMBER_DAMAGE[case]
    for member_id in (alice, bob):
        row = placement_row(fleet.db, member_id)
        damage(fleet.db, member_id, column, rewrite(row, attack(markers, f"{case}-{member_id}".replace(" ", "_"))))
    before = panes(fleet)
    director = str(fleet.director)

    sent = fleet.send(fleet.director, alice, "hello", "--json")
    assert sent.code == 0 and sent.json()["notified"] is False, sent  # stored; the preview is owed
    assert says_damaged(sent.err) and "Do not resend." in sent.err, sent

    waited = fleet.cafleet("message", "wait", director, "--timeout", "0.3")
    assert waited.code == 3 and says_damaged(waited.err), waited  # its retry pass refused to type

    captured = fleet.cafleet("member", "capture", str(alice))
    assert captured.code == 1 and says_damaged(captured.err) and captured.err.count("\n") == 1, captured

    prompted = fleet.cafleet("member", "prompt", str(alice), "do it")
    assert prompted.code == 1 and says_damaged(prompted.err), prompted

    listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state", "--json")
    assert listed.code == 0, listed
    states = {m["member_id"]: m for m in listed.json()}
    assert states[alice]["state"] == "dead" and says_damaged(states[alice]["state_detail"]), states[alice]

    stream = Stream(fleet.environ, fleet.fleet_id, "--interval", "0.3")
    try:
        dead = stream.wait_event(lambda e: e["event"] == "dead" and e["member_id"] == alice)
        assert says_damaged(dead["detail"]), dead
    finally:
        assert stream.stop() == 0, (stream.events, stream.proc.stderr.read())

    store = open_store(fleet.db)
    try:
        shown = screens._capture(members.get_member(store, alice)["placement"])
    finally:
        store.close()
    assert shown["status"] == "damaged" and says_damaged(shown["error"]) and shown["text"] == "", shown

    deleted = fleet.cafleet("member", "delete", str(alice))
    assert deleted.code == 0 and says_damaged(deleted.out + deleted.err), deleted  # deregistered, pane left open
    assert fleet.query("SELECT status FROM members WHERE member_id = ?", alice) == [("deregistered",)]

    gone = fleet.cafleet("fleet", "delete", str(fleet.fleet_id))
    assert gone.code == 0 and says_damaged(gone.out + gone.err), gone

    assert list(markers.iterdir()) == [], "a stored value ran a command"
    assert panes(fleet) == before, "a pane was closed"
    assert fleet.records(alice) == fleet.records(bob) == [], "a member received keystrokes"


DIRECTOR_DAMAGE = {
    "identity": ("mux_pane_id", lambda row, bad: row["mux_pane_id"] + bad),
    "pane id": ("mux_pane_id", lambda row, bad: row["mux_pane_id"].replace(" ", bad + " ", 1)),
    "window id": ("mux_window_id", lambda row, bad: row["mux_window_id"] + bad),
    "session id": ("mux_session", lambda row, bad: row["mux_session"].replace("@", bad + "@", 1)),
    "socket path": ("mux_session", lambda row, bad: row["mux_session"] + bad),
}


@pytest.mark.parametrize("case", sorted(DIRECTOR_DAMAGE))
def test_member_create_refuses_a_damaged_director_placement(fleet, markers, case):
    column, rewrite = DIRECTOR_DAMAGE[case]
    row = placement_row(fleet.db, fleet.director)
    damage(fleet.db, fleet.director, column, rewrite(row, attack(markers, case.replace(" ", "_"))))
    before = panes(fleet)
    created = fleet.cafleet(
        "member", "create", "--fleet-id", str(fleet.fleet_id), "--name", "carol", "--description", "c",
        "--coding-agent", "standin", "Wait.",
    )  # fmt: skip
    assert created.code == 1 and says_damaged(created.err) and created.err.count("\n") == 1, created
    assert fleet.member_count() == 1, "a member was registered"
    assert list(markers.iterdir()) == [], "a stored value ran a command"
    assert panes(fleet) == before


def test_fleet_create_refuses_a_socket_path_it_would_later_refuse(env, tmp_path):
    """A tmux server whose socket path holds a space could record a placement that every
    later command refuses as damaged: the fleet is refused at once instead, saying why."""
    import subprocess

    from tests.support.pane_fleet import cafleet

    folder = tmp_path / "with space"
    folder.mkdir()
    socket = str(folder / "sock")
    tmux = ["tmux", "-f", "/dev/null", "-S", socket]
    started = subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "20", "--", "sleep", "600"], env=env)
    assert started.returncode == 0
    try:
        pane = subprocess.run([*tmux, "display-message", "-p", "#{pane_id}"], capture_output=True, env=env, text=True)
        inside = dict(env, TMUX=f"{socket},1,0", TMUX_PANE=pane.stdout.strip())
        created = cafleet(["fleet", "create", "--name", "x", "--coding-agent", "standin"], inside)
        assert created.code == 1 and "socket path" in created.err and "plain socket path" in created.err, created
        assert created.err.count("\n") == 1
        listed = cafleet(["fleet", "list", "--json"], env)
        assert listed.code == 0 and listed.json() == [], listed
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
