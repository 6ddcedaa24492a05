"""`fleet create` from a real tmux pane: one commit with Director and placement."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import re


def test_fleet_create_text_and_json(cli, env, tmux_server, store):
    pane = tmux_server.main_pane()
    environ = dict(env, **tmux_server.environ_for(pane))
    result = cli("fleet", "create", "--name", "alpha", "--coding-agent", "claude", environ=environ)
    assert (result.code, result.err) == (0, "")
    assert result.out == "created fleet 1 (alpha); you are its Director, member 1\n"
    record = cli("fleet", "create", "--name", "beta", "--coding-agent", "codex", "--json", environ=environ).json()
    assert list(record) == ["fleet_id", "name", "director_member_id", "created_at"]
    assert (record["fleet_id"], record["name"], record["director_member_id"]) == (2, "beta", 2)
    row = store.execute(
        "SELECT f.director_member_id, m.name, m.status, p.backend, p.mux_pane_id, p.coding_agent, p.mux_session "
        "FROM fleets f JOIN members m ON m.member_id = f.director_member_id "
        "JOIN member_placements p ON p.member_id = m.member_id WHERE f.fleet_id = 2"
    ).fetchone()
    identity = tmux_server.run("display-message", "-p", "-t", pane, "#{pid}:#{start_time}:#{pane_pid}").strip()
    assert row[:6] == (2, "Director", "active", "tmux", f"{pane} {identity}", "codex")
    assert re.fullmatch(r"\$\d+@" + re.escape(tmux_server.socket), row[6])
    roster = cli("member", "list", "2", "--json").json()
    assert [(r["member_id"], r["kind"], r["pane_id"]) for r in roster] == [(2, "director", pane)]


def test_fleet_create_outside_a_pane_writes_nothing(cli, env, store):
    result = cli("fleet", "create", "--name", "alpha", "--coding-agent", "claude")
    assert result.code == 1
    assert result.err == "Error: no multiplexer found; run inside a tmux or herdr session.\n"
    assert store.execute("SELECT count(*) FROM fleets").fetchone()[0] == 0


def test_fleet_create_validates_before_writing(cli, env, tmux_server, store):
    environ = dict(env, **tmux_server.environ_for(tmux_server.main_pane()))
    result = cli("fleet", "create", "--name", "x", "--coding-agent", "emacs", environ=environ)
    assert result.code == 2 and result.err.startswith("Error: unknown coding agent 'emacs'")
    result = cli("fleet", "create", "--name", "  ", "--coding-agent", "claude", environ=environ)
    assert (result.code, result.err) == (2, "Error: --name must not be blank.\n")
    result = cli("fleet", "create", "--coding-agent", "claude", environ=environ)
    assert (result.code, result.err) == (2, "Error: missing option --name NAME; see `cafleet fleet create --help`.\n")
    assert store.execute("SELECT count(*) FROM fleets").fetchone()[0] == 0


def test_fleet_create_in_a_dead_pane_context(cli, env, tmux_server, store):
    environ = dict(env, **tmux_server.environ_for("%999"))
    result = cli("fleet", "create", "--name", "x", "--coding-agent", "claude", environ=environ)
    assert result.code == 1 and result.err.startswith("Error: tmux pane %999 is gone")
    assert store.execute("SELECT count(*) FROM fleets").fetchone()[0] == 0
