"""Coding-agent backends (argv, model/effort rules, binaries) and the asset installer.

Real files in temporary homes, real executables (small shell scripts written here) on a
private PATH; the process's own HOME and config variables point at a decoy directory that
must stay empty, proving the code reads only the mapping it is given.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cafleet
from cafleet.agents import backends, install
from cafleet.agents.backends import AGENTS, binary_version, build_argv, find_binary, validate
from cafleet.agents.install import AssetFile, AssetTarget, InstalledAsset, asset_targets, installed_version
from cafleet.errors import AgentError, ConfigError, ExitCode, UsageError

ASSETS = Path(__file__).resolve().parents[1] / "src" / "cafleet" / "agents" / "assets"
VERSION = cafleet.__version__
RULE = "Bash(cafleet message *)"


@pytest.fixture(autouse=True)
def decoy(tmp_path, monkeypatch):
    """Point the real process's HOME and config variables at a directory that must stay empty."""
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    monkeypatch.setenv("HOME", str(decoy))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "OPENCODE_CONFIG_DIR", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, str(decoy / name.lower()))
    monkeypatch.chdir(tmp_path)
    yield decoy
    assert list(decoy.iterdir()) == []


@pytest.fixture
def home(tmp_path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def expected_asset(relative: str) -> bytes:
    """The embedded file as installed, computed independently of the installer."""
    text = (ASSETS / relative).read_text(encoding="utf-8")
    assert "@CAFLEET_VERSION@" in text
    return text.replace("@CAFLEET_VERSION@", VERSION).encode("utf-8")


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# --- argv --------------------------------------------------------------------------------


def test_public_agents_hide_the_standin():
    assert AGENTS == ("claude", "codex", "opencode")
    validate("standin", None, None)  # accepted although hidden


@pytest.mark.parametrize(
    "agent, options, expected",
    [
        (
            "claude",
            {},
            ["claude", "--permission-mode", "dontAsk", "--allowedTools", RULE, "--name", "tester", "--", "fix it"],
        ),
        (
            "claude",
            {"model": "opus", "effort": "max"},
            [
                "claude",
                "--permission-mode",
                "dontAsk",
                "--allowedTools",
                RULE,
                "--name",
                "tester",
                "--model",
                "opus",
                "--effort",
                "max",
                "--",
                "fix it",
            ],
        ),
        (
            "claude",
            {"effort": "low"},
            [
                "claude",
                "--permission-mode",
                "dontAsk",
                "--allowedTools",
                RULE,
                "--name",
                "tester",
                "--effort",
                "low",
                "--",
                "fix it",
            ],
        ),
        (
            "codex",
            {},
            ["codex", "--no-daemon", "--ask-for-approval", "never", "--sandbox", "workspace-write", "--", "fix it"],
        ),
        (
            "codex",
            {"model": "gpt-5.5", "effort": "minimal"},
            [
                "codex",
                "--no-daemon",
                "--ask-for-approval",
                "never",
                "--sandbox",
                "workspace-write",
                "--model",
                "gpt-5.5",
                "--config=model_reasoning_effort=minimal",
                "--",
                "fix it",
            ],
        ),
        (
            "codex",
            {"effort": "xhigh"},
            [
                "codex",
                "--no-daemon",
                "--ask-for-approval",
                "never",
                "--sandbox",
                "workspace-write",
                "--config=model_reasoning_effort=xhigh",
                "--",
                "fix it",
            ],
        ),
        ("opencode", {}, ["opencode", "--agent", "cafleet", "--prompt=fix it"]),
        (
            "opencode",
            {"model": "openrouter/anthropic/claude-x"},
            ["opencode", "--agent", "cafleet", "--model", "openrouter/anthropic/claude-x", "--prompt=fix it"],
        ),
    ],
)
def test_argv_is_exact(agent, options, expected):
    assert build_argv(agent, member_name="tester", prompt="fix it", **options) == expected


def test_claude_rules_are_closed_by_name_before_the_prompt():
    # --allowedTools is variadic: the next word after the rules must be an option
    argv = build_argv("claude", member_name="-odd name", prompt="- a bullet\nsecond line")
    rules_end = argv.index("--allowedTools") + 1 + len(backends.CLAUDE_ALLOWED_TOOLS)
    assert argv[rules_end : rules_end + 2] == ["--name", "-odd name"]
    assert argv[-2:] == ["--", "- a bullet\nsecond line"]


def test_prompt_starting_with_a_dash_stays_one_literal_word():
    assert build_argv("codex", member_name="m", prompt="--help me")[-2:] == ["--", "--help me"]
    assert build_argv("opencode", member_name="m", prompt="-x\ny")[-1] == "--prompt=-x\ny"


def test_standin_argv_runs_this_interpreter():
    assert build_argv("standin", member_name="m", prompt="ignored", member_id=7) == [
        sys.executable,
        "-m",
        "cafleet.agents.standin",
        "--member-id",
        "7",
    ]
    with pytest.raises(ValueError):
        build_argv("standin", member_name="m", prompt="p")


def test_nul_in_prompt_is_refused():
    with pytest.raises(UsageError) as caught:
        build_argv("claude", member_name="m", prompt="a\x00b")
    assert str(caught.value) == "the spawn prompt contains a NUL character; remove it"


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "agent, model, effort, message",
    [
        ("gemini", None, None, "unknown coding agent 'gemini'; choose claude, codex or opencode"),
        ("Claude", None, None, "unknown coding agent 'Claude'; choose claude, codex or opencode"),
        (None, None, None, "unknown coding agent 'None'; choose claude, codex or opencode"),
        ("claude", None, "minimal", "invalid --effort 'minimal' for claude; choose low, medium, high, xhigh or max"),
        ("claude", None, "", "invalid --effort '' for claude; choose low, medium, high, xhigh or max"),
        ("codex", None, "max", "invalid --effort 'max' for codex; choose minimal, low, medium, high or xhigh"),
        ("opencode", None, "high", "opencode takes no --effort; leave it out"),
        ("standin", None, "low", "standin takes no --effort; leave it out"),
        (
            "opencode",
            "sonnet",
            None,
            "invalid --model 'sonnet' for opencode; use the form provider/model (for example anthropic/claude-sonnet-4-5)",
        ),
        (
            "opencode",
            "/model",
            None,
            "invalid --model '/model' for opencode; use the form provider/model (for example anthropic/claude-sonnet-4-5)",
        ),
        (
            "opencode",
            "provider/",
            None,
            "invalid --model 'provider/' for opencode; use the form provider/model (for example anthropic/claude-sonnet-4-5)",
        ),
        ("claude", "", None, "invalid --model ''; give a model name without spaces that does not start with -"),
        (
            "claude",
            "claude opus",
            None,
            "invalid --model 'claude opus'; give a model name without spaces that does not start with -",
        ),
        ("codex", "-m", None, "invalid --model '-m'; give a model name without spaces that does not start with -"),
        (
            "codex",
            "o3\x1b[2J",
            None,
            "invalid --model 'o3\\x1b[2J'; give a model name without spaces that does not start with -",
        ),
        ("standin", "any", None, "the standin agent takes no --model; leave it out"),
    ],
)
def test_invalid_choices_are_usage_errors(agent, model, effort, message):
    with pytest.raises(UsageError) as caught:
        validate(agent, model, effort)
    assert str(caught.value) == message
    assert caught.value.exit_code == ExitCode.USAGE == 2
    with pytest.raises(UsageError):
        build_argv(agent, member_name="m", prompt="p", model=model, effort=effort, member_id=1)


def test_long_junk_is_not_echoed_whole():
    with pytest.raises(UsageError) as caught:
        validate("claude", "x" * 500 + " y", None)
    assert (
        str(caught.value)
        == f"invalid --model '{'x' * 40}'…; give a model name without spaces that does not start with -"
    )


@pytest.mark.parametrize(
    "agent, effort",
    [("claude", e) for e in ("low", "medium", "high", "xhigh", "max")]
    + [("codex", e) for e in ("minimal", "low", "medium", "high", "xhigh")],
)
def test_every_documented_effort_is_accepted(agent, effort):
    validate(agent, "some-model.1", effort)


# --- binaries ----------------------------------------------------------------------------


def fake_program(directory: Path, name: str, body: str, executable: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755 if executable else 0o644)
    return path


def test_find_binary_returns_the_program_on_the_given_path(tmp_path):
    first = fake_program(tmp_path / "bin1", "claude", "echo one")
    fake_program(tmp_path / "bin2", "claude", "echo two")
    environ = {"PATH": f"{tmp_path / 'empty'}:{tmp_path / 'bin1'}:{tmp_path / 'bin2'}"}
    assert find_binary("claude", environ) == str(first)


@pytest.mark.parametrize(
    "agent, message",
    [
        (
            "claude",
            "claude not found on PATH; install Claude Code or pass --coding-agent with an installed agent (codex, opencode)",
        ),
        (
            "codex",
            "codex not found on PATH; install Codex CLI or pass --coding-agent with an installed agent (claude, opencode)",
        ),
        (
            "opencode",
            "opencode not found on PATH; install opencode or pass --coding-agent with an installed agent (claude, codex)",
        ),
    ],
)
def test_missing_binary_is_a_clear_agent_error(tmp_path, agent, message):
    fake_program(tmp_path / "bin", agent, "echo not executable", executable=False)
    fake_program(tmp_path / "bin", "other-tool", "echo x")
    for environ in ({"PATH": str(tmp_path / "bin")}, {"PATH": ""}, {}):
        with pytest.raises(AgentError) as caught:
            find_binary(agent, environ)
        assert str(caught.value) == message
        assert caught.value.exit_code == ExitCode.FAILURE


def test_standin_binary_is_this_interpreter():
    assert find_binary("standin", {}) == sys.executable


def test_find_binary_refuses_unknown_agent():
    with pytest.raises(UsageError):
        find_binary("vim", {"PATH": "/usr/bin"})


def test_binary_version_first_line_with_the_given_environment(tmp_path):
    fake_program(tmp_path / "bin", "codex", 'echo "  "\necho "codex-cli 9.$MARK.1"\necho second line\necho noise >&2')
    assert binary_version("codex", {"PATH": str(tmp_path / "bin"), "MARK": "42"}) == "codex-cli 9.42.1"


@pytest.mark.parametrize("body", ["echo 1.0; exit 3", "exit 0", ": > /dev/null"])
def test_binary_version_none_on_failure_or_silence(tmp_path, body):
    fake_program(tmp_path / "bin", "opencode", body)
    assert binary_version("opencode", {"PATH": str(tmp_path / "bin")}) is None


def test_binary_version_none_when_missing():
    assert binary_version("claude", {"PATH": ""}) is None


def test_binary_version_gives_up_after_its_timeout(tmp_path):
    fake_program(tmp_path / "bin", "claude", "exec sleep 30")
    started = time.monotonic()
    assert binary_version("claude", {"PATH": str(tmp_path / "bin")}, timeout=0.3) is None
    assert time.monotonic() - started < 20  # gave up well before the program's 30 s


def test_backends_module_imports_stay_light():
    code = (
        "import sys, cafleet.agents.backends; "
        "print(sorted(m for m in ('re', 'typing', 'subprocess', 'dataclasses', 'shutil', 'json') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip() == "[]"


# --- asset targets -----------------------------------------------------------------------


def test_targets_under_home_by_default(home):
    environ = {"HOME": str(home)}
    skill = "skills/cafleet/SKILL.md"
    assert asset_targets("claude", environ) == [
        AssetTarget(
            "claude", home / ".claude/skills/cafleet", (AssetFile(skill, home / ".claude/skills/cafleet/SKILL.md"),)
        ),
    ]
    assert asset_targets("codex", environ) == [
        AssetTarget(
            "codex", home / ".codex/skills/cafleet", (AssetFile(skill, home / ".codex/skills/cafleet/SKILL.md"),)
        ),
        AssetTarget(
            "codex",
            home / ".codex/rules/cafleet.rules",
            (AssetFile("codex/rules/cafleet.rules", home / ".codex/rules/cafleet.rules"),),
        ),
    ]
    assert asset_targets("opencode", environ) == [
        AssetTarget(
            "opencode",
            home / ".config/opencode/skills/cafleet",
            (AssetFile(skill, home / ".config/opencode/skills/cafleet/SKILL.md"),),
        ),
        AssetTarget(
            "opencode",
            home / ".opencode/agents/cafleet.md",
            (AssetFile("opencode/agents/cafleet.md", home / ".opencode/agents/cafleet.md"),),
        ),
    ]
    assert asset_targets("standin", environ) == []


def test_config_variables_move_the_targets(tmp_path):
    environ = {
        "CLAUDE_CONFIG_DIR": str(tmp_path / "cc"),
        "CODEX_HOME": str(tmp_path / "cx"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "OPENCODE_CONFIG_DIR": str(tmp_path / "oc"),
    }  # no HOME at all: nothing falls back to it
    paths = [t.path for agent in AGENTS for t in asset_targets(agent, environ)]
    assert paths == [
        tmp_path / "cc/skills/cafleet",
        tmp_path / "cx/skills/cafleet",
        tmp_path / "cx/rules/cafleet.rules",
        tmp_path / "xdg/opencode/skills/cafleet",
        tmp_path / "oc/agents/cafleet.md",
    ]


def test_empty_config_variable_counts_as_unset(home):
    environ = {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": "",
        "CODEX_HOME": "",
        "XDG_CONFIG_HOME": "",
        "OPENCODE_CONFIG_DIR": "",
    }
    assert [t.path for t in asset_targets("opencode", environ)] == [
        home / ".config/opencode/skills/cafleet",
        home / ".opencode/agents/cafleet.md",
    ]
    assert asset_targets("claude", environ)[0].path == home / ".claude/skills/cafleet"


@pytest.mark.parametrize(
    "agent, variable",
    [
        ("claude", "CLAUDE_CONFIG_DIR"),
        ("codex", "CODEX_HOME"),
        ("opencode", "XDG_CONFIG_HOME"),
        ("opencode", "OPENCODE_CONFIG_DIR"),
        ("claude", "HOME"),
    ],
)
def test_relative_config_variable_is_a_config_error(tmp_path, home, agent, variable):
    environ = {"HOME": str(home), variable: "relative/dir"}
    with pytest.raises(ConfigError) as caught:
        install.install(agent, environ)
    assert str(caught.value) == f"{variable} must be an absolute path, got 'relative/dir'; fix it or unset it"
    assert caught.value.exit_code == ExitCode.FAILURE
    assert not (tmp_path / "relative").exists()  # cwd is tmp_path: nothing was created there
    assert tree(home) == []


def test_missing_home_is_a_config_error_only_when_needed(tmp_path):
    with pytest.raises(ConfigError) as caught:
        asset_targets("codex", {})
    assert (
        str(caught.value)
        == "HOME is not set; set it to your home directory so cafleet knows where to install agent assets"
    )
    assert (
        asset_targets("claude", {"CLAUDE_CONFIG_DIR": str(tmp_path / "cc")})[0].path == tmp_path / "cc/skills/cafleet"
    )


def test_unknown_agent_install_is_a_usage_error(home):
    with pytest.raises(UsageError):
        install.install("gemini", {"HOME": str(home)})


# --- installing --------------------------------------------------------------------------


def test_install_every_agent_writes_exact_files(home):
    environ = {"HOME": str(home)}
    results = [r for agent in AGENTS for r in install.install(agent, environ)]
    assert results == [
        InstalledAsset("claude", home / ".claude/skills/cafleet", "created"),
        InstalledAsset("codex", home / ".codex/skills/cafleet", "created"),
        InstalledAsset("codex", home / ".codex/rules/cafleet.rules", "created"),
        InstalledAsset("opencode", home / ".config/opencode/skills/cafleet", "created"),
        InstalledAsset("opencode", home / ".opencode/agents/cafleet.md", "created"),
    ]
    assert tree(home) == [
        ".claude/skills/cafleet/SKILL.md",
        ".codex/rules/cafleet.rules",
        ".codex/skills/cafleet/SKILL.md",
        ".config/opencode/skills/cafleet/SKILL.md",
        ".opencode/agents/cafleet.md",
    ]
    skill = expected_asset("skills/cafleet/SKILL.md")
    for directory in (".claude", ".codex", ".config/opencode"):
        assert (home / directory / "skills/cafleet/SKILL.md").read_bytes() == skill
    assert (home / ".codex/rules/cafleet.rules").read_bytes() == expected_asset("codex/rules/cafleet.rules")
    assert (home / ".opencode/agents/cafleet.md").read_bytes() == expected_asset("opencode/agents/cafleet.md")
    # the parts each agent reads, spelled out
    assert skill.startswith(b"---\nname: cafleet\ndescription: Run or join a cafleet fleet of coding agents")
    assert f'metadata:\n  cafleet-version: "{VERSION}"\n---\n'.encode() in skill
    preset = (home / ".opencode/agents/cafleet.md").read_text()
    assert preset.startswith(f"---\n# cafleet-version: {VERSION}\n")
    assert preset.endswith('mode: primary\npermission:\n  bash:\n    "cafleet message *": allow\n---\n')
    rules = (home / ".codex/rules/cafleet.rules").read_text()
    assert rules.startswith(f"# cafleet-version: {VERSION}\n")
    assert 'pattern = ["cafleet", "message"],\n    decision = "allow",' in rules
    mode = stat.S_IMODE((home / ".codex/rules/cafleet.rules").stat().st_mode)
    assert mode == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_second_install_is_unchanged_and_touches_nothing(home):
    environ = {"HOME": str(home)}
    first = install.install("codex", environ)
    files = [home / ".codex/skills/cafleet/SKILL.md", home / ".codex/rules/cafleet.rules"]
    before = [(p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in files]
    second = install.install("codex", environ)
    assert [r.status for r in first] == ["created", "created"]
    assert [r.status for r in second] == ["unchanged", "unchanged"]
    assert [(p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in files] == before
    assert tree(home) == [".codex/rules/cafleet.rules", ".codex/skills/cafleet/SKILL.md"]  # no temp files left


def test_changed_or_missing_files_are_restored(home):
    environ = {"HOME": str(home)}
    install.install("codex", environ)
    skill = home / ".codex/skills/cafleet/SKILL.md"
    skill.write_text('---\nname: cafleet\nmetadata:\n  cafleet-version: "0.0.1"\n---\nold\n')
    skill.chmod(0o600)
    (home / ".codex/rules/cafleet.rules").unlink()
    assert installed_version(skill.parent) == "0.0.1"
    assert install.install("codex", environ) == [
        InstalledAsset("codex", home / ".codex/skills/cafleet", "updated"),
        InstalledAsset("codex", home / ".codex/rules/cafleet.rules", "created"),
    ]
    assert skill.read_bytes() == expected_asset("skills/cafleet/SKILL.md")
    assert stat.S_IMODE(skill.stat().st_mode) == 0o600  # the user's mode is kept
    assert installed_version(skill.parent) == VERSION


def test_install_honours_config_variables_and_never_home(tmp_path, home):
    environ = {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "cc"),
        "CODEX_HOME": str(tmp_path / "cx"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "OPENCODE_CONFIG_DIR": str(tmp_path / "oc"),
    }
    for agent in AGENTS:
        install.install(agent, environ)
    assert tree(home) == []
    assert tree(tmp_path / "cc") == ["skills/cafleet/SKILL.md"]
    assert tree(tmp_path / "cx") == ["rules/cafleet.rules", "skills/cafleet/SKILL.md"]
    assert tree(tmp_path / "xdg") == ["opencode/skills/cafleet/SKILL.md"]
    assert tree(tmp_path / "oc") == ["agents/cafleet.md"]


def test_unwritable_destination_is_a_config_error(home):
    (home / ".claude").mkdir()
    (home / ".claude/skills").write_text("a file where a directory should be")
    with pytest.raises(ConfigError) as caught:
        install.install("claude", {"HOME": str(home)})
    assert str(caught.value) == (
        f"cannot create the directory {home}/.claude/skills/cafleet: Not a directory; a file is in the way or access is denied"
    )
    assert (home / ".claude/skills").read_text() == "a file where a directory should be"


def test_directory_in_place_of_a_file_is_a_config_error(home):
    (home / ".opencode/agents/cafleet.md").mkdir(parents=True)
    with pytest.raises(ConfigError) as caught:
        install.install("opencode", {"HOME": str(home)})
    assert str(caught.value) == (
        f"cannot read {home}/.opencode/agents/cafleet.md: Is a directory; fix or remove it, then rerun cafleet setup"
    )


def test_installed_version_reads_each_kind_of_asset(home):
    environ = {"HOME": str(home)}
    for agent in AGENTS:
        for target in asset_targets(agent, environ):
            assert installed_version(target.path) is None
    for agent in AGENTS:
        install.install(agent, environ)
    for agent in AGENTS:
        for target in asset_targets(agent, environ):
            assert installed_version(target.path) == VERSION
            assert installed_version(str(target.path)) == VERSION
    (home / "plain.md").write_text("---\nname: x\n---\nno version here\n")
    assert installed_version(home / "plain.md") is None


# --- the skill itself --------------------------------------------------------------------

PLACEHOLDER_IDS = {"FLEET": "1", "DIRECTOR": "1", "ME": "2", "MEMBER": "2", "MSG": "7"}


def skill_commands() -> list[str]:
    """Every full cafleet command in SKILL.md: indented code lines and inline `cafleet ...`
    spans of three or more words."""
    import re

    text = (ASSETS / "skills/cafleet/SKILL.md").read_text()
    commands = [
        line.strip() for line in text.splitlines() if line.startswith("    ") and line.strip().startswith("cafleet ")
    ]
    for span in re.findall(r"`(cafleet [^`]+)`", text):
        if len(span.split()) >= 3:
            commands.append(span)
    return commands


def test_every_skill_command_parses_with_the_real_command_line():
    from cafleet.cli import parser

    commands = skill_commands()
    seen = set()
    for command in commands:
        words = [PLACEHOLDER_IDS.get(word, word) for word in shlex.split(command)]
        assert words[0] == "cafleet"
        parsed = parser.parse(words[1:])  # raises UsageError on an unknown flag or a bad id
        assert parsed.command is not None and parsed.help is None, command
        seen.add(f"{parsed.command.group} {parsed.command.name}")
    assert {
        "fleet create",
        "fleet delete",
        "member create",
        "member delete",
        "member list",
        "member capture",
        "message send",
        "message broadcast",
        "message poll",
        "message show",
        "message ack",
        "message wait",
        "message listen",
    } <= seen
    assert len(commands) >= 18


def test_skill_frontmatter_fits_claude_codex_and_opencode():
    import re

    text = (ASSETS / "skills/cafleet/SKILL.md").read_text()
    assert text.startswith("---\n")
    front, _, body = text[4:].partition("\n---\n")
    lines = front.splitlines()
    assert lines[0] == "name: cafleet" and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", "cafleet")
    assert lines[1].startswith("description: ")
    description = lines[1][len("description: ") :]
    assert 1 <= len(description) <= 1024 and ": " not in description and not description.startswith(("'", '"', "`"))
    assert lines[2:] == ["metadata:", '  cafleet-version: "@CAFLEET_VERSION@"']
    assert body.strip() and len(body.split()) < 1200  # short enough to load on demand
