"""The docs stay true: every command is documented, every documented command parses,
and the README opens with the two set-up commands that CI runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cafleet.cli import parser
from cafleet.cli.table import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def command_words(command) -> str:
    return "cafleet " + command.group + (f" {command.name}" if command.name else "")


@pytest.mark.parametrize("command", COMMANDS, ids=command_words)
def test_every_command_is_in_the_readme_reference(command):
    assert f"`{command_words(command)}" in README, f"{command_words(command)} is not documented in README.md"


@pytest.mark.parametrize("command", COMMANDS, ids=command_words)
def test_every_command_has_help(command):
    args = [*command_words(command).split()[1:], "--help"]
    parsed = parser.parse(args)
    assert parsed.help.startswith(f"Usage: {command_words(command)}")


def documented_lines():
    """`cafleet ...` lines inside README code blocks (placeholders filled in)."""
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("cafleet "):
                lines.append(line)
    return lines


@pytest.mark.parametrize("line", documented_lines())
def test_readme_examples_parse(line):
    args = shlex.split(line)[1:]
    parsed = parser.parse(args)
    assert parsed.command is not None or parsed.help is not None


def test_readme_starts_with_the_two_setup_commands():
    first_block = re.search(r"```sh\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert first_block == ["bash scripts/install.sh && .venv/bin/cafleet demo", "bash scripts/test.sh"]
    assert README.index("```sh") < README.index("## ")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci


def test_readme_shows_the_preview_as_the_one_line_that_is_typed():
    """The README's preview example is exactly what the drain types: one line, the header
    and the body joined by ⏎ (never "two lines")."""
    from cafleet.delivery.keystrokes.preview import flatten, render_preview

    example = re.search(r"`(\[cafleet msg [^`]*)`", README).group(1)
    typed = flatten(render_preview(12, 1, "2026-11-29T13:37:38.123456+00:00", "Please review PR 7", 200))
    assert example == typed and "\n" not in typed and "⏎" in typed
    assert "one-line **preview**" in README and "two-line" not in README.lower()


def test_storage_doc_names_the_one_side_file_a_refusal_can_add():
    """docs/storage.md once said no side file appears beside a refused file; a -wal without
    its -shm gets one (pinned by the test it cites)."""
    storage = (ROOT / "docs" / "storage.md").read_text(encoding="utf-8")
    assert "no side file appears or disappears" not in storage
    cited = "test_storage_faults.py::test_refused_file_with_a_wal_but_no_shm_gains_a_shm_and_nothing_else"
    assert cited in storage
    assert re.search(
        r"^def test_refused_file_with_a_wal_but_no_shm_gains_a_shm_and_nothing_else\(",
        (ROOT / "tests" / "test_storage_faults.py").read_text(encoding="utf-8"),
        re.M,
    )


def test_decisions_measure_idle_from_activity_as_the_seed_does():
    """The seed: idle is null without activity. docs/decisions.md once counted it from
    registration; it now says `silent` for that case and cites the test that pins it."""
    decisions = (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")
    assert "counts from registration" not in decisions
    assert "test_watch.py::test_a_member_without_message_activity_is_silent_and_never_idle" in decisions
    assert "`silent`" in decisions and "`silent`" in README
