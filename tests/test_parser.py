"""The parser as a product: every branch of the parser, table-driven; the help lists every
parameter with its default, wrapped to the terminal; did-you-mean; bodies that start with
'-'; the table and the handlers agree; the completion scripts work; the README's command
reference is the table's; and the hot commands import none of the help or error
machinery."""

from __future__ import annotations

import inspect
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cafleet.cli import completion, helptext, parser
from cafleet.cli.table import COMMANDS, FROM_SETTINGS, GROUPS
from cafleet.errors import CafleetError, ExitCode

ROOT = Path(__file__).resolve().parent.parent


def words(command) -> list[str]:
    return [command.group] + ([command.name] if command.name else [])


def key(command) -> str:
    return " ".join(words(command))


# --- parsing: values, defaults and every branch ---------------------------------------------

PARSES = [
    # (argv, the values the handler gets (a subset), --json)
    ("fleet watch 7", {"fleet_id": 7, "interval": 5.0, "idle_after": 600.0}, False),
    ("fleet watch 7 --interval 2 --idle-after=30", {"interval": 2.0, "idle_after": 30.0}, False),
    ("member capture 3", {"member_id": 3, "lines": 40, "ansi": False}, False),
    ("member capture 3 --lines 5 --ansi --json", {"lines": 5, "ansi": True}, True),
    ("member list 1", {"fleet_id": 1, "state": False, "idle_after": 600.0}, False),
    ("message wait 2", {"member_id": 2, "timeout": None}, False),
    ("message wait 2 --timeout 0", {"timeout": 0.0}, False),
    ("setup", {"coding_agents": []}, False),
    ("setup --coding-agent claude --coding-agent codex", {"coding_agents": ["claude", "codex"]}, False),
    ("server", {"host": None, "port": None}, False),
    ("server --port 9000 --host=localhost", {"host": "localhost", "port": 9000}, False),
    ("demo --keep", {"keep": True}, False),
    ("completion fish", {"shell": "fish"}, False),
    (
        "message send --from-member-id 1 --to-member-id 2 hi",
        {"from_id": 1, "to_id": 2, "text": "hi", "file": None},
        False,
    ),
    ("message send --to-member-id 2 --file - --from-member-id 1", {"text": None, "file": "-"}, False),
    ("message send --from-member-id 1 --to-member-id 2 -- --help", {"text": "--help"}, False),
    ("message send --from-member-id 1 --to-member-id 2 -", {"text": "-"}, False),
    (
        "member create --fleet-id 1 --name n --description d go",
        {"coding_agent": None, "model": None, "effort": None, "text": "go", "file": None},
        False,
    ),
    ("fleet create '--name=with space' --coding-agent claude", {"name": "with space"}, False),
]


@pytest.mark.parametrize("argv, values, json_output", PARSES, ids=[p[0] for p in PARSES])
def test_parse_values_and_defaults(argv, values, json_output):
    parsed = parser.parse(shlex.split(argv))
    assert parsed.help is None
    assert {k: parsed.values[k] for k in values} == values
    assert parsed.json is json_output
    assert set(parsed.values) == {p.dest for p in parsed.command.params}


REFUSED = [
    # (argv, the exact error message with its hint)
    (["flet"], "unknown command 'flet'; did you mean `cafleet fleet`?"),
    (["msg", "poll", "1"], "unknown command 'msg'; did you mean `cafleet message`?"),
    (["zzz"], "unknown command 'zzz'; run `cafleet --help` for the list."),
    (["message", "sned"], "unknown command message 'sned'; did you mean `cafleet message send`?"),
    (["member", "lst", "1"], "unknown command member 'lst'; did you mean `cafleet member list`?"),
    (["message", "qqq"], "unknown command message 'qqq'; run `cafleet message --help` for the list."),
    (
        ["fleet", "watch", "1", "--intervl", "3"],
        "unknown option '--intervl' for `cafleet fleet watch`; did you mean --interval?",
    ),
    (["message", "poll", "1", "--jsn"], "unknown option '--jsn' for `cafleet message poll`; did you mean --json?"),
    (
        ["message", "send", "--from", "1"],
        "unknown option '--from' for `cafleet message send`; did you mean --from-member-id?",
    ),
    (
        ["message", "poll", "1", "--bogus"],
        "unknown option '--bogus' for `cafleet message poll`; see `cafleet message poll --help`.",
    ),
    (
        ["message", "send", "--from-member-id", "1", "--to-member-id", "2", "-x"],
        "unknown option '-x' for `cafleet message send`; a TEXT that starts with '-' goes after `--` "
        "(or in a file given with --file), and `cafleet message send --help` lists the options.",
    ),
    (
        ["member", "prompt", "1", "-x"],
        "unknown option '-x' for `cafleet member prompt`; a TEXT that starts with '-' goes after `--`, "
        "and `cafleet member prompt --help` lists the options.",
    ),
    (
        ["message", "poll", "1", "--json=yes"],
        "unknown option '--json' for `cafleet message poll`; did you mean --json?",
    ),
    (["member", "capture", "1", "--ansi=1"], "option --ansi takes no value."),
    (["member", "capture", "1", "--lines"], "option --lines needs a value (N)."),
    (["message", "wait", "1", "--timeout", "1", "--timeout", "2"], "option --timeout was given more than once."),
    (["message", "poll"], "missing MEMBER_ID; see `cafleet message poll --help`."),
    (["fleet", "create", "--name", "x"], "missing option --coding-agent AGENT; see `cafleet fleet create --help`."),
    (["message", "poll", "1", "2"], "unexpected argument '2' for `cafleet message poll`."),
    (["message", "poll", "-5"], "MEMBER_ID must be a positive integer, got '-5'."),
    (["completion", "tcsh"], "SHELL must be one of bash, zsh, fish, got 'tcsh'."),
    (
        ["fleet", "watch", "1", "--interval", "0.1"],
        "--interval must be a number of seconds from 0.2 to 3600, got '0.1'.",
    ),
]


@pytest.mark.parametrize("argv, message", REFUSED, ids=[" ".join(r[0]) for r in REFUSED])
def test_parse_refusals(argv, message):
    with pytest.raises(CafleetError) as caught:
        parser.parse(argv)
    assert caught.value.with_hint() == message
    assert caught.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], "Usage: cafleet GROUP"),
        (["--help"], "Usage: cafleet GROUP"),
        (["help"], "Usage: cafleet GROUP"),
        (["member"], "Usage: cafleet member COMMAND"),
        (["member", "-h"], "Usage: cafleet member COMMAND"),
        (["member", "create", "--name", "x", "--help"], "Usage: cafleet member create --fleet-id"),
        (["message", "poll", "-h", "--bogus"], "Usage: cafleet message poll MEMBER_ID"),
        (["completion", "--help"], "Usage: cafleet completion SHELL"),
    ],
)
def test_help_requests(argv, expected):
    parsed = parser.parse(argv)
    assert parsed.help.startswith(expected)
    assert parsed.values == {}


# --- bodies that start with '-' (reported: `message send ... "- item one"` was refused) ------

DASH_TEXTS = [
    "- item one",
    "- item one\n- item two",
    "-\titem",
    "--not an option",
    "-h me",
    "--json is a flag",
    "--to=do this",
    "-- leading",
    "- ",
]


@pytest.mark.parametrize("text", DASH_TEXTS)
def test_a_dash_led_text_with_whitespace_is_the_body(text):
    parsed = parser.parse(["message", "send", "--from-member-id", "1", "--to-member-id", "2", text])
    assert parsed.values["text"] == text and parsed.values["file"] is None
    parsed = parser.parse(["member", "prompt", "4", text])
    assert parsed.values["text"] == text


def test_markdown_list_body_is_sent_byte_exact(cli, build):
    """The reported failure: a Markdown list as the body was "unknown option"."""
    _, _, (m1, m2) = build.fleet()
    body = "- item one\n- item two"
    result = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), body, "--json")
    assert (result.code, result.err) == (0, "")
    assert [r["text"] for r in cli("message", "poll", str(m2), "--json").json()] == [body]
    result = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "-v")
    assert result.code == 2 and result.out == ""
    assert "after `--` (or in a file given with --file)" in result.err and result.err.count("\n") == 1
    assert len(cli("message", "poll", str(m2), "--json").json()) == 1


# --- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=key)
def test_help_lists_every_parameter_with_its_description(command):
    """Reported: `member create --help` omitted --fleet-id, --name and --description."""
    text = helptext.command_help(command, width=200)
    flat = " ".join(text.split())
    for param in command.params:
        assert param.help, f"{key(command)} {param.dest} has no help text"
        label = param.metavar if param.flag is None else param.flag
        if param.flag and param.kind != "flag":
            label += f" {param.metavar}"
        assert f"\n  {label}" in text, f"{label} is not in `cafleet {key(command)} --help`"
        entry = f"{label} {param.help}"
        assert entry in flat
        if param.required:
            assert flat[flat.index(entry) + len(entry) :].startswith(" (required")
    assert "--json" in text and "--help" in text


def test_member_create_help_names_required_options_and_defaults():
    text = parser.parse(["member", "create", "--help"]).help
    for line in ("--fleet-id FLEET_ID", "--name NAME", "--description DESCRIPTION"):
        assert f"  {line}" in text
    assert "(default: the Director's)" in " ".join(text.split())


@pytest.mark.parametrize("command", [c for c in COMMANDS if any(p.default == FROM_SETTINGS for p in c.params)], ids=key)
def test_numeric_defaults_and_ranges_come_from_the_settings(command):
    from cafleet.config import declared

    text = " ".join(helptext.command_help(command, width=500).split())
    for param in command.params:
        if param.default == FROM_SETTINGS:
            setting = declared(param.flag)
            assert parser.default(param) == setting.default
            assert setting.allowed() in text


@pytest.mark.parametrize("width", [40, 57, 80, 132])
def test_help_is_wrapped_to_the_width(width):
    screens = [helptext.top_help(width)] + [
        helptext.group_help(g, width) for g in GROUPS if any(c.name for c in COMMANDS if c.group == g)
    ]
    screens += [helptext.command_help(c, width) for c in COMMANDS]
    for screen in screens:
        for line in screen.splitlines():
            assert len(line) <= width, (width, line)
    # nothing is lost to the wrapping: every word of every description is still there
    for command in COMMANDS:
        flat = " ".join(helptext.command_help(command, width).split())
        for param in command.params:
            assert " ".join(param.help.split()) in flat


def test_help_follows_the_terminal_width(run_cli, env):
    wide = run_cli("member", "create", "--help", environ=dict(env, COLUMNS="200"))
    narrow = run_cli("member", "create", "--help", environ=dict(env, COLUMNS="50"))
    assert wide.code == narrow.code == 0
    assert max(map(len, narrow.out.splitlines())) <= 48 < max(map(len, wide.out.splitlines()))
    assert " ".join(wide.out.split()) == " ".join(narrow.out.split())  # the same words, wrapped


# --- the table and the handlers agree -------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=key)
def test_every_handler_resolves_and_takes_exactly_the_tables_parameters(command):
    module_name, _, function_name = command.handler.partition(":")
    module = __import__(module_name, fromlist=[function_name])
    handler = getattr(module, function_name)
    signature = inspect.signature(handler)
    assert list(signature.parameters) == ["ctx"] + [p.dest for p in command.params]
    defaults = [name for name, p in signature.parameters.items() if p.default is not inspect.Parameter.empty]
    assert defaults == [], f"{command.handler} restates defaults the table declares: {defaults}"


def test_the_table_is_consistent():
    seen = set()
    kinds: dict[str, set] = {}
    for command in COMMANDS:
        assert command.group in GROUPS
        assert (command.group, command.name) not in seen
        seen.add((command.group, command.name))
        flags = [p.flag for p in command.params if p.flag]
        assert len(flags) == len(set(flags)) and "--json" not in flags and "--help" not in flags
        for param in command.params:
            assert param.kind in ("id", "count", "seconds", "number", "text", "flag", "multi")
            assert not (param.required and param.default is not None)
            if param.flag:
                assert param.flag.startswith("--") and not any(c.isspace() for c in param.flag)
                kinds.setdefault(param.flag, set()).add(param.kind == "flag")
            if param.kind in ("count", "seconds", "number"):
                from cafleet.config import declared

                declared(param.flag)  # every numeric option is declared (and so bounded)
    # an option takes a value everywhere or nowhere, so completion can tell which words are values
    assert all(len(v) == 1 for v in kinds.values()), kinds
    assert all(any(c.group == g for c in COMMANDS) for g in GROUPS)


# --- the README's command reference ----------------------------------------------------------


def test_readme_command_reference_is_generated_from_the_table():
    readme = (ROOT / "README.md").read_text()
    assert helptext.replace_reference(readme) == readme, (
        "README.md's command reference is stale; run `python -m cafleet.cli.helptext --write-readme README.md`"
    )
    for command in COMMANDS:
        assert f"| `{' '.join(helptext.usage_tokens(command)).replace('|', chr(92) + '|')}` |" in readme


def test_reference_writer_refreshes_a_stale_readme(tmp_path):
    stale = tmp_path / "README.md"
    stale.write_text(f"# x\n\n{helptext.REFERENCE_START}\n\n| old |\n\n{helptext.REFERENCE_END}\n\nrest\n")
    done = subprocess.run(
        [sys.executable, "-m", "cafleet.cli.helptext", "--write-readme", str(stale)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    text = stale.read_text()
    assert "| old |" not in text and helptext.reference_markdown() in text and text.endswith("rest\n")


# --- shell completion -----------------------------------------------------------------------


def bash_complete(script: str, cases: list[list[str]], cwd: Path) -> list[list[str]]:
    """COMPREPLY for each partial command line (the last word is the one being completed)."""
    lines = [script, "set -u"]
    for case in cases:
        quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in ["cafleet", *case])
        lines += [
            f"COMP_WORDS=({quoted}); COMP_CWORD={len(case)}; COMPREPLY=()",
            "_cafleet",
            'printf "%s\\n" "${COMPREPLY[*]:-}"',
        ]
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", "\n".join(lines)], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return [sorted(line.split()) for line in done.stdout.splitlines()]


def test_bash_completion_completes_from_the_table(cli, tmp_path):
    result = cli("completion", "bash")
    assert result.code == 0 and result.out == completion.bash()
    (tmp_path / "notes.md").write_text("x")
    (tmp_path / "nothing.txt").write_text("x")
    cases = {
        ("",): sorted([*GROUPS, "--help", "--version"]),
        ("me",): ["member", "message"],
        ("message", ""): sorted(["send", "broadcast", "poll", "wait", "listen", "show", "ack", "--help"]),
        ("message", "se"): ["send"],
        ("message", "send", "--"): sorted(["--from-member-id", "--to-member-id", "--file", "--json", "--help"]),
        ("message", "send", "--from-member-id", ""): [],
        ("message", "send", "--file", "no"): ["notes.md", "nothing.txt"],
        ("member", "capture", "3", "--"): sorted(["--lines", "--ansi", "--json", "--help"]),
        ("member", "capture", "3", "--ansi", "--j"): ["--json"],
        ("fleet", "watch", "1", "--interval", ""): [],
        ("completion", ""): sorted(["bash", "zsh", "fish", "--json", "--help"]),
        ("completion", "f"): ["fish"],
        ("doctor", "--"): ["--help", "--json"],
        ("nosuch", ""): [],
    }
    # every command's options, generated from the table
    for command in COMMANDS:
        flags = [p.flag for p in command.params if p.flag] + ["--json", "--help"]
        cases[(*words(command), "--")] = sorted(flags)
    got = bash_complete(completion.bash(), [list(c) for c in cases], tmp_path)
    assert dict(zip(cases, got)) == cases


def test_zsh_completion_script(tmp_path):
    script = completion.zsh()
    if shutil.which("zsh"):
        path = tmp_path / "cafleet.zsh"
        path.write_text(script)
        done = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    assert script.startswith("#compdef cafleet\n") and "compdef _cafleet cafleet" in script
    assert f"compadd -- {' '.join(GROUPS)} --help --version" in script
    for command in COMMANDS:
        flags = [p.flag for p in command.params if p.flag]
        valued = [p.flag for p in command.params if p.flag and p.kind != "flag"]
        assert f"'{key(command)}') next=({' '.join([*flags, '--json', '--help'])}" in script
        assert f"valued=({' '.join(valued)}) ;;" in script


def test_fish_completion_script(tmp_path):
    script = completion.fish()
    if shutil.which("fish"):
        path = tmp_path / "cafleet.fish"
        path.write_text(script)
        done = subprocess.run(["fish", "--no-execute", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    lines = script.splitlines()
    for group in GROUPS:
        assert any(line.startswith(f"complete -c cafleet -n '__cafleet_at' -a {group} ") for line in lines)
    for command in COMMANDS:
        if command.name:
            assert any(
                line.startswith(f"complete -c cafleet -n '__cafleet_at {command.group}' -a {command.name} ")
                for line in lines
            )
        for param in command.params:
            if param.flag:
                mode = " -r -F" if param.flag == "--file" else (" -x" if param.kind != "flag" else "")
                assert any(
                    line.startswith(
                        f"complete -c cafleet -n '__cafleet_in {key(command)}' -l {param.flag[2:]}{mode} -d "
                    )
                    for line in lines
                ), param.flag


def test_completion_json_and_bad_shell(cli):
    document = cli("completion", "zsh", "--json").json()
    assert document == {"shell": "zsh", "script": completion.zsh()}
    result = cli("completion", "tcsh")
    assert (result.code, result.out, result.err) == (
        2,
        "",
        "Error: SHELL must be one of bash, zsh, fish, got 'tcsh'.\n",
    )


# --- start-up: the help and error machinery stay off the hot path ----------------------------

PROBE = """
import io, json, sys
from cafleet.cli.context import Context
from cafleet.cli.main import main
out, err = io.BytesIO(), io.BytesIO()
code = main(sys.argv[1:], Context(stdout=out, stderr=err))
print(json.dumps([code, sorted(sys.modules)]))
"""
OFF_PATH = {"difflib", "textwrap", "shutil", "cafleet.cli.helptext", "cafleet.cli.completion"}


def loaded(env, *args) -> tuple[int, set]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    code, modules = json.loads(done.stdout)
    return code, set(modules)


def test_hot_commands_import_no_help_or_suggestion_machinery(env, build):
    _, _director, (m1, m2) = build.fleet()
    for args in (
        ["message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "- item"],
        ["message", "poll", str(m2)],
        ["message", "ack", "1"],
        ["message", "wait", str(m2), "--timeout", "0"],
        ["member", "list", "1"],
    ):
        code, modules = loaded(env, *args)
        assert code == (ExitCode.WAIT_TIMEOUT if args[1] == "wait" else 0), args
        assert not modules & OFF_PATH, (args, modules & OFF_PATH)
    # the probe can see them: help and a misspelling do load them
    assert {"cafleet.cli.helptext", "textwrap", "shutil"} <= loaded(env, "message", "send", "--help")[1]
    code, modules = loaded(env, "message", "sned")
    assert code == 2 and "difflib" in modules and "cafleet.cli.helptext" not in modules
