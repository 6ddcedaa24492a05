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
    args = command_words(command).split()[1:] + ["--help"]
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
