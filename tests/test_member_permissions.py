"""`cafleet doctor`'s member-permissions section: rules in the coding agents' own settings
that would stop a member's `cafleet message` commands, read from real files written into a
throw-away HOME and project (docs/agents.md, "Permission rules that silence members")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cafleet.agents.permissions import findings

ALL = ["send", "broadcast", "poll", "show", "ack", "wait"]


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A git project (its root holds .git) with the command run from a folder inside it."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    inside = root / "pkg"
    inside.mkdir()
    monkeypatch.chdir(inside)
    return inside


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run(env, project, tmp_path):
    return findings(env, str(project), claude_managed=tmp_path / "etc-claude", opencode_managed=tmp_path / "etc-oc")


def test_nothing_configured_finds_nothing(env, project, tmp_path):
    assert run(env, project, tmp_path) == []


def test_claude_deny_and_ask_rules_in_every_settings_file(env, project, tmp_path):
    home = Path(env["HOME"])
    user = write(home / ".claude/settings.json", json.dumps({"permissions": {"deny": ["Bash(cafleet:*)"]}}))
    shared = write(
        project / ".claude/settings.json",
        json.dumps({"permissions": {"ask": ["Bash(cafleet message send *)"], "deny": ["Bash(rm:*)", "Read(./.env)"]}}),
    )
    local = write(project / ".claude/settings.local.json", json.dumps({"permissions": {"deny": ["Bash"]}}))
    managed = write(
        tmp_path / "etc-claude/managed-settings.d/10-team.json",
        json.dumps({"permissions": {"deny": ["Bash(cafleet message poll)", "Bash(cafleet message poll 3)"]}}),
    )
    found = run(env, project, tmp_path)
    assert [(f.path, f.rule, f.commands) for f in found] == [
        (str(user), 'permissions.deny "Bash(cafleet:*)"', tuple(ALL)),
        (str(shared), 'permissions.ask "Bash(cafleet message send *)"', ("send",)),
        (str(local), 'permissions.deny "Bash"', tuple(ALL)),
        (str(managed), 'permissions.deny "Bash(cafleet message poll 3)"', ("poll",)),
    ]
    assert found[1].problem.startswith("asks before (refused in a member's dontAsk mode)")
    assert all(f.coding_agent == "claude" for f in found)


def test_claude_config_dir_and_wildcards(env, project, tmp_path):
    config = tmp_path / "claude-config"
    environ = dict(env, CLAUDE_CONFIG_DIR=str(config))
    write(Path(env["HOME"]) / ".claude/settings.json", json.dumps({"permissions": {"deny": ["Bash"]}}))  # not read
    rules = ["Bash(cafleet * ack *)", "Bash(cafleet message wait*)", "Bash(cafleetx *)", "Bash(*)", "Bash(caf*)"]
    path = write(config / "settings.json", json.dumps({"permissions": {"deny": rules}}))
    found = findings(environ, str(project), claude_managed=tmp_path / "none", opencode_managed=tmp_path / "none")
    assert [(f.path, f.rule, f.commands) for f in found] == [
        (str(path), 'permissions.deny "Bash(cafleet * ack *)"', ("ack",)),
        (str(path), 'permissions.deny "Bash(cafleet message wait*)"', ("wait",)),
        (str(path), 'permissions.deny "Bash(*)"', tuple(ALL)),
        (str(path), 'permissions.deny "Bash(caf*)"', tuple(ALL)),
    ]


def test_claude_managed_rules_only_switch(env, project, tmp_path):
    managed = write(
        tmp_path / "etc-claude/managed-settings.json", json.dumps({"allowManagedPermissionRulesOnly": True})
    )
    found = run(env, project, tmp_path)
    assert [(f.path, f.rule, f.commands) for f in found] == [
        (str(managed), "allowManagedPermissionRulesOnly: true", tuple(ALL))
    ]
    assert "ignore the spawn's --allowedTools" in found[0].problem
    # a managed allow rule covering the commands settles it; one covering a few leaves the rest
    managed.write_text(
        json.dumps({"allowManagedPermissionRulesOnly": True, "permissions": {"allow": ["Bash(cafleet message *)"]}})
    )
    assert run(env, project, tmp_path) == []
    managed.write_text(
        json.dumps(
            {"allowManagedPermissionRulesOnly": True, "permissions": {"allow": ["Bash(cafleet message poll:*)"]}}
        )
    )
    assert run(env, project, tmp_path)[0].commands == ("send", "broadcast", "show", "ack", "wait")
    # the switch counts only in managed settings
    managed.unlink()
    write(project / ".claude/settings.json", json.dumps({"allowManagedPermissionRulesOnly": True}))
    assert run(env, project, tmp_path) == []


def test_claude_settings_that_are_not_json(env, project, tmp_path):
    broken = write(project / ".claude/settings.json", '{"permissions": {"deny": [}')
    listed = write(project / ".claude/settings.local.json", "[]")
    found = run(env, project, tmp_path)
    assert [(f.path, f.rule) for f in found] == [(str(broken), ""), (str(listed), "")]
    assert found[0].problem.startswith("is not valid JSON (")
    assert found[1].problem == "is not a JSON object: claude ignores it"


def test_codex_rules_forbid_or_prompt(env, project, tmp_path):
    home = Path(env["HOME"])
    write(home / ".codex/rules/cafleet.rules", 'prefix_rule(pattern = ["cafleet", "message"], decision = "allow")\n')
    user = write(
        home / ".codex/rules/strict.rules",
        '# no fleet messaging here\nprefix_rule(\n    pattern = ["cafleet"],\n    decision = "forbidden",\n)\n'
        'prefix_rule(pattern = ["git", "push"], decision = "forbidden")\n',
    )
    at_root = write(
        project.parent / ".codex/rules/team.rules",
        'prefix_rule(pattern = ["cafleet", "message", ["send", "broadcast"]], decision = "prompt")\n',
    )
    found = run(env, project, tmp_path)
    assert [(f.path, f.rule, f.commands) for f in found] == [
        (str(user), 'line 2: prefix_rule(pattern=["cafleet"], decision="forbidden")', tuple(ALL)),
        (
            str(at_root),
            'line 1: prefix_rule(pattern=["cafleet", "message", ["send", "broadcast"]], decision="prompt")',
            ("send", "broadcast"),
        ),
    ]
    assert found[0].problem.startswith("forbids") and found[1].problem.startswith("prompts for")


def test_codex_home_and_a_rules_file_it_cannot_parse(env, project, tmp_path):
    codex_home = tmp_path / "codex-home"
    broken = write(codex_home / "rules/bad.rules", 'prefix_rule(pattern = ["cafleet",\n')
    write(Path(env["HOME"]) / ".codex/rules/x.rules", 'prefix_rule(pattern=["cafleet"], decision="forbidden")\n')
    found = findings(dict(env, CODEX_HOME=str(codex_home)), str(project), tmp_path / "n", tmp_path / "n")
    assert [(f.coding_agent, f.path, f.rule) for f in found] == [("codex", str(broken), "")]
    assert found[0].problem.startswith("cannot be parsed (line ")


def test_opencode_rules_merged_as_opencode_merges_them(env, project, tmp_path):
    config = Path(env["HOME"]) / ".config/opencode"
    write(config / "opencode.json", json.dumps({"permission": {"bash": {"*": "deny", "cafleet *": "ask"}}}))
    # the preset's allow comes after the general rules (and after the project's agent rules,
    # merged before it); it is judged where `cafleet setup` installs it, installed or not
    assert run(env, project, tmp_path) == []
    write(
        project.parent / "opencode.jsonc",
        '{\n  // members must not wait\n  "agent": {"cafleet": {"permission": {"bash": {"cafleet message wait *": "deny",}}}},\n}\n',
    )
    assert run(env, project, tmp_path) == []
    # inline config is merged after the preset: a rule of its own decides, but one the
    # project file wrote first keeps that first place, before the preset's allow
    inline = {"agent": {"cafleet": {"permission": {"bash": {"cafleet message wait *": "deny"}}}}}
    environ = dict(env, OPENCODE_CONFIG_CONTENT=json.dumps(inline))
    assert findings(environ, str(project), tmp_path / "n", tmp_path / "n") == []
    inline["agent"]["cafleet"]["permission"]["bash"] = {"cafleet message wait*": "deny"}
    environ = dict(env, OPENCODE_CONFIG_CONTENT=json.dumps(inline))
    found = findings(environ, str(project), tmp_path / "n", tmp_path / "n")
    assert [(f.path, f.rule, f.commands) for f in found] == [
        ("OPENCODE_CONFIG_CONTENT", 'permission {"bash": {"cafleet message wait*": "deny"}}', ("wait",))
    ]
    # the shorthand replaces every rule of the agent; a managed file is merged last
    write(tmp_path / "etc-oc/opencode.json", json.dumps({"agent": {"cafleet": {"permission": "ask"}}}))
    found = run(env, project, tmp_path)
    assert [(f.path, f.rule, f.commands) for f in found] == [
        (str(tmp_path / "etc-oc/opencode.json"), 'permission {"*": {"*": "ask"}}', tuple(ALL))
    ]


def test_opencode_cafleet_agent_disabled(env, project, tmp_path):
    path = write(project / ".opencode/opencode.json", json.dumps({"agent": {"cafleet": {"disable": True}}}))
    found = run(env, project, tmp_path)
    assert [(f.path, f.rule, f.commands) for f in found] == [
        (str(path), 'agent {"cafleet": {"disable": true}}', tuple(ALL))
    ]


def test_opencode_config_that_is_not_json(env, project, tmp_path):
    broken = write(project / ".opencode/opencode.json", "{permission: deny}")
    found = run(env, project, tmp_path)
    assert [(f.coding_agent, f.path, f.rule) for f in found] == [("opencode", str(broken), "")]


def test_doctor_reports_findings_and_exits_1(cli, env, project, tmp_path):
    path = write(project / ".claude/settings.json", json.dumps({"permissions": {"deny": ["Bash(cafleet message:*)"]}}))
    report = cli("doctor", "--json")
    assert report.code == 1
    section = report.json()["member_permissions"]
    assert section["ok"] is False and section["directory"] == os.getcwd()
    assert section["findings"] == [
        {
            "coding_agent": "claude",
            "path": str(path),
            "rule": 'permissions.deny "Bash(cafleet message:*)"',
            "problem": "refuses `cafleet message` commands",
            "commands": ALL,
        }
    ]
    text = cli("doctor").out.splitlines()
    at = text.index(f"✗ member permissions (members started in {project}):")
    assert text[at + 1] == (
        f'    ✗ claude: {path}: permissions.deny "Bash(cafleet message:*)" refuses `cafleet message` commands '
        "(send, broadcast, poll, show, ack, wait)"
    )
    assert any(line.startswith("fix: remove or narrow the rules above") for line in text)
    path.unlink()
    healthy = cli("doctor", "--json").json()["member_permissions"]
    assert healthy == {"ok": True, "directory": str(project), "findings": []}


def test_a_settings_file_that_cannot_be_read_is_a_finding(env, project, tmp_path):
    path = project / ".claude/settings.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"permissions": "\xff"}')  # not UTF-8
    found = run(env, project, tmp_path)
    assert [(f.coding_agent, f.path, f.rule) for f in found] == [("claude", str(path), "")]
    assert found[0].problem.startswith("cannot be read (UnicodeDecodeError: ")
