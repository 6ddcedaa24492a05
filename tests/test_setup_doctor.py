"""`cafleet setup` into temporary config folders, and `cafleet doctor` healthy and broken."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cafleet import __version__


def fake_agent(bin_dir: Path, name: str, version_line: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_setup_installs_every_agent_and_records_rows(cli, env, store):
    home = Path(env["HOME"])
    result = cli("setup", "--json")
    assert result.code == 0, result
    report = result.json()
    paths = {(a["coding_agent"], a["path"]) for a in report["assets"]}
    assert paths == {
        ("claude", str(home / ".claude/skills/cafleet")),
        ("codex", str(home / ".codex/skills/cafleet")),
        ("codex", str(home / ".codex/rules/cafleet.rules")),
        ("opencode", str(Path(env["XDG_CONFIG_HOME"]) / "opencode/skills/cafleet")),
        ("opencode", str(home / ".opencode/agents/cafleet.md")),
    }
    assert all(a["status"] == "created" for a in report["assets"])
    skill = (home / ".claude/skills/cafleet/SKILL.md").read_text()
    assert "cafleet message poll" in skill and __version__ in skill
    rows = store.conn.execute("SELECT coding_agent, path, cafleet_version FROM asset_installs").fetchall()
    assert {(r[0], r[1]) for r in rows} == paths
    assert {r[2] for r in rows} == {__version__}


def test_setup_is_idempotent_and_narrowed(cli, env, store):
    assert cli("setup", "--coding-agent", "claude").code == 0
    skill = Path(env["HOME"]) / ".claude/skills/cafleet/SKILL.md"
    before = skill.read_bytes()
    first_row = store.conn.execute("SELECT installed_at FROM asset_installs").fetchall()
    result = cli("setup", "--coding-agent", "claude")
    assert result.out.splitlines()[1] == f"claude: {skill.parent} (unchanged)"
    assert skill.read_bytes() == before
    rows = store.conn.execute("SELECT coding_agent, installed_at FROM asset_installs").fetchall()
    assert [r[0] for r in rows] == ["claude"]
    assert rows[0][1] >= first_row[0][0]
    assert not (Path(env["HOME"]) / ".codex").exists()


def test_setup_honours_config_dirs_and_refuses_relative_ones(cli, env, tmp_path):
    claude_dir = tmp_path / "claude-config"
    result = cli("setup", "--coding-agent", "claude", environ=dict(env, CLAUDE_CONFIG_DIR=str(claude_dir)))
    assert result.code == 0
    assert (claude_dir / "skills/cafleet/SKILL.md").exists()
    result = cli("setup", "--coding-agent", "codex", environ=dict(env, CODEX_HOME="relative/codex"))
    assert result.code == 1
    assert result.err.startswith("Error: CODEX_HOME must be an absolute path, got 'relative/codex'")
    assert not Path("relative").exists()


def test_setup_unknown_agent_is_usage_error(cli):
    result = cli("setup", "--coding-agent", "vim")
    assert (result.code, result.err) == (
        2,
        "Error: unknown coding agent 'vim' for --coding-agent; choose claude, codex, opencode.\n",
    )


def test_doctor_broken_environment(cli, env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no agent settings here
    bad = tmp_path / "bad.db"
    bad.write_text("not a database")
    result = cli("doctor", "--json", environ=dict(env, CAFLEET_DATABASE_URL=str(bad), PATH=str(tmp_path / "empty")))
    assert result.code == 1
    report = result.json()
    assert set(report) == {"multiplexer", "database", "coding_agents", "assets", "member_permissions", "memory"}
    assert report["multiplexer"]["ok"] is False
    assert report["database"]["ok"] is False and "is not a SQLite database" in report["database"]["error"]
    assert report["coding_agents"]["ok"] is False
    text = cli("doctor", environ=dict(env, CAFLEET_DATABASE_URL=str(bad), PATH=str(tmp_path / "empty"))).out
    assert text.splitlines()[0] == "✗ multiplexer: no multiplexer found; run inside a tmux or herdr session."
    assert "fix: run `cafleet setup`" not in text
    assert "fix: install Claude Code, Codex CLI or opencode so that its command is on PATH" in text


def test_doctor_healthy_environment(cli, env, tmp_path, tmux_server, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no agent settings here
    bin_dir = tmp_path / "bin"
    fake_agent(bin_dir, "claude", "2.1.0 (Claude Code)")
    pane = tmux_server.new_pane(["sleep", "300"])
    environ = dict(env, PATH=f"{bin_dir}:{os.environ['PATH']}", TMUX=f"{tmux_server.socket},1,0", TMUX_PANE=pane)
    before_setup = cli("doctor", "--json", environ=environ).json()
    assert before_setup["assets"]["ok"] is False
    assert before_setup["assets"]["fix"] == "run `cafleet setup` to install the current skill and presets"
    assert cli("setup", "--coding-agent", "claude", environ=environ).code == 0
    result = cli("doctor", environ=environ)
    assert result.code == 0, result.out
    lines = result.out.splitlines()
    assert lines[0] == f"✓ multiplexer: tmux, calling pane {pane}"
    assert lines[1].startswith("✓ database: ") and lines[1].endswith("(current format (schema 1))")
    assert f"    ✓ claude: {bin_dir / 'claude'} (2.1.0 (Claude Code))" in lines
    assert f"    ✓ claude: {Path(env['HOME']) / '.claude/skills/cafleet'} (current)" in lines
    assert "✓ member permissions: no rule stops `cafleet message` for members started here" in lines
