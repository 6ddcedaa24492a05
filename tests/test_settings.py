"""Settings: every ``CAFLEET_*`` variable and every numeric option is declared once in
``cafleet.config``, read and bounded before a command stores anything, and documented by
a README table generated from the declarations.

A bad value is one usage error line (exit 2) that names the setting, quotes the value and
says the allowed range; the database is byte-for-byte unchanged.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from cafleet import config
from cafleet.cli.context import Context
from cafleet.cli.table import COMMANDS
from cafleet.config import declarations, readme_table
from cafleet.errors import SettingError, shown

ROOT = Path(__file__).resolve().parent.parent
CONFIG_READER = ROOT / "src" / "cafleet" / "config" / "__init__.py"  # the one reader of the environment
NUMERIC = [s for s in (*declarations.ENVIRONMENT, *declarations.OPTIONS) if s.kind in ("seconds", "number", "integer")]


def dump(db_path: str) -> list[str]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def refusal(setting, raw: str) -> str:
    return f"Error: {setting.name} must be {setting.allowed()}, got {shown(raw)}.\n"


def bad_values(setting) -> list[str]:
    """Values every numeric setting must refuse: unparsable, not finite, out of range."""
    values = [
        "nan",
        "NaN",
        "inf",
        "-inf",
        "1e400",
        "-1",
        "x",
        "1_0",
        "٣",
        "0x10",
        " ",
        f"{setting.high * 2:g}",
        str(10**30),
        "9" * 5000,
    ]
    if setting.low > 0:
        values.append(f"{setting.low / 2:g}")
    if setting.kind == "integer":
        values += ["1.5", "1e3"]
    return values


@pytest.fixture
def trio(build):
    """Director + two members with pending placements (no pane to type into)."""
    return build.fleet()


# --- the reported failures ----------------------------------------------------------------

# --- every declared numeric setting -------------------------------------------------------


@pytest.mark.parametrize("setting", [s for s in NUMERIC if s.name.startswith("CAFLEET_")], ids=lambda s: s.name)
def test_every_numeric_variable_refuses_bad_values_before_a_send_stores(cli, env, trio, db_path, setting):
    _, _, (m1, m2) = trio
    before = dump(db_path)
    for raw in bad_values(setting):
        result = cli(
            "message",
            "send",
            "--from-member-id",
            str(m1),
            "--to-member-id",
            str(m2),
            "hi",
            environ=dict(env, **{setting.name: raw}),
        )
        assert (result.code, result.out, result.err) == (2, "", refusal(setting, raw)), raw
        assert dump(db_path) == before
    # An empty variable counts as unset: the default.
    assert config.Settings(dict(env, **{setting.name: ""})).__getattribute__(setting.attr) == setting.default


# Each numeric option in a command that would otherwise succeed or run.
OPTION_COMMANDS = {
    "--interval": ["fleet", "watch", "{fleet}", "--interval", "{value}"],
    "--idle-after": ["member", "list", "{fleet}", "--idle-after", "{value}"],
    "--timeout": ["message", "wait", "{member}", "--timeout", "{value}"],
    "--lines": ["member", "capture", "{member}", "--lines", "{value}"],
    "--port": ["server", "--port", "{value}"],
    "--usd": ["fleet", "budget", "{fleet}", "--usd", "{value}"],
    "--tokens": ["fleet", "budget", "{fleet}", "--tokens", "{value}"],
    "--per-hour": ["fleet", "auto-revive", "{fleet}", "--per-hour", "{value}"],
    "--budget-usd": [
        "member",
        "create",
        "--fleet-id",
        "{fleet}",
        "--name",
        "n",
        "--description",
        "d",
        "--budget-usd",
        "{value}",
        "Hi",
    ],
    "--budget-tokens": [
        "member",
        "create",
        "--fleet-id",
        "{fleet}",
        "--name",
        "n",
        "--description",
        "d",
        "--budget-tokens",
        "{value}",
        "Hi",
    ],
}


def test_every_numeric_option_is_declared_and_exercised():
    numeric = {p.flag for c in COMMANDS for p in c.params if p.kind in ("count", "seconds", "number")}
    assert numeric == {s.name for s in declarations.OPTIONS} == set(OPTION_COMMANDS)


@pytest.mark.parametrize("setting", list(declarations.OPTIONS), ids=lambda s: s.name)
def test_every_numeric_option_refuses_bad_values(cli, trio, db_path, setting):
    fleet_id, _, (m1, _) = trio
    before = dump(db_path)
    for raw in [*bad_values(setting), ""]:
        argv = [part.format(fleet=fleet_id, member=m1, value=raw) for part in OPTION_COMMANDS[setting.name]]
        result = cli(*argv)
        assert (result.code, result.out, result.err) == (2, "", refusal(setting, raw)), raw
    assert dump(db_path) == before


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_declared_number_is_accepted_exactly_when_it_is_in_range(data):
    setting = data.draw(st.sampled_from(NUMERIC))
    if setting.kind in ("seconds", "number"):
        value = data.draw(st.floats(allow_nan=True, allow_infinity=True))
        raw = repr(value)
        ok = setting.low <= value <= setting.high
    else:
        value = data.draw(st.integers(min_value=-10, max_value=setting.high * 3))
        raw = str(value)
        ok = setting.low <= value <= setting.high
    if ok:
        assert setting.parse(raw) == value
    else:
        with pytest.raises(SettingError) as caught:
            setting.parse(raw)
        assert str(caught.value) == refusal(setting, raw)[len("Error: ") : -1]


def test_settings_are_read_once_per_command(env):
    ctx = Context(environ=dict(env, CAFLEET_MAX_TEXT_LEN="7"))
    first = ctx.settings
    ctx.environ["CAFLEET_MAX_TEXT_LEN"] = "8"
    assert ctx.settings is first and ctx.max_text_len == 7


# --- the README table and completeness ----------------------------------------------------


def test_readme_configuration_table_is_generated_from_the_declarations():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_table.TABLE_START in readme and readme_table.TABLE_END in readme
    assert readme_table.replace_table(readme) == readme, "run: python -m cafleet.config --write-readme README.md"


def test_every_cafleet_variable_in_the_source_is_declared():
    """Any ``CAFLEET_NAME`` written in src/ (read, set for a pane, or documented) is one of
    the declarations, so none escapes the README table or the bounds."""
    declared = {s.name for s in declarations.ENVIRONMENT}
    found = {}
    for path in (ROOT / "src" / "cafleet").rglob("*"):
        if path.suffix in (".py", ".md", ".rules") and path.is_file():
            for name in re.findall(r"(?<![@\w])CAFLEET_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")):
                found.setdefault(name, path.relative_to(ROOT))
    missing = {name: str(where) for name, where in found.items() if name not in declared}
    assert missing == {}
    assert "CAFLEET_SUBMIT_SETTLE" in found  # the scan sees the source


def test_only_config_reads_the_process_environment():
    """``os.environ`` is named in config/__init__.py alone (the command's context reads it
    once, through ``config.process_environ``; child processes get ``config.child_environ``),
    and no test hook variable is declared among the settings: nothing else can read a
    setting, or a hook, behind the command's back."""
    readers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "src" / "cafleet").rglob("*.py")
        if "os.environ" in path.read_text(encoding="utf-8") and path != CONFIG_READER
    )
    assert readers == []
    assert [s.name for s in declarations.ENVIRONMENT if s.name.startswith("CAFLEET_TEST_")] == []


def test_generator_writes_the_table_between_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# x\n\n{readme_table.TABLE_START}\nstale\n{readme_table.TABLE_END}\n\nafter\n", encoding="utf-8"
    )
    subprocess.run([sys.executable, "-m", "cafleet.config", "--write-readme", str(readme)], check=True)
    text = readme.read_text(encoding="utf-8")
    assert "stale" not in text and text.endswith(f"{readme_table.TABLE_END}\n\nafter\n")
    assert "| `CAFLEET_BUSY_TIMEOUT` | 5 | a number of seconds from 0 to 3600 |" in text
