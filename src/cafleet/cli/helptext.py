"""The help screens and the README's command reference, generated from the command table.

Imported only on the help path (``--help``, ``cafleet`` alone) and by the README generator,
so ``textwrap`` and ``shutil`` cost nothing to the commands agents run hundreds of times.
Every parameter is listed, required ones included, with its default and, for a numeric
option, its allowed range (both from the table and :mod:`cafleet.config`); text is wrapped
to the terminal's width.

    python -m cafleet.cli.helptext --markdown               # the reference, on stdout
    python -m cafleet.cli.helptext --write-readme README.md # refresh it between the markers
"""

from __future__ import annotations

import shutil
import textwrap

from cafleet.cli.table import COMMANDS, FROM_SETTINGS, GROUPS, Command, Param, default

MIN_WIDTH = 40
LABEL_WIDTH = 24  # the column where descriptions start, unless every label is shorter
JSON_HELP = "print one JSON document instead of text"
HELP_HELP = "show this help"


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` wins; 80 when not a terminal), less a margin."""
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns - 2)


def usage_tokens(command: Command) -> list[str]:
    """Positionals, then options; a message body (TEXT or --file) comes last."""
    words = ["cafleet", command.group] + ([command.name] if command.name else [])
    for param in command.params:
        if param.flag is None and not (command.body and param.dest == "text"):
            words.append(param.metavar if param.required else f"[{param.metavar}]")
    for param in command.params:
        if param.flag is None or (command.body and param.dest == "file"):
            continue
        token = param.flag if param.kind == "flag" else f"{param.flag} {param.metavar}"
        if param.kind == "multi":
            token += " ..."
        words.append(token if param.required else f"[{token}]")
    if command.body:
        words.append("(TEXT | --file PATH)")
    return words


def _wrap_tokens(first: str, tokens: list[str], width: int) -> list[str]:
    """``first`` followed by ``tokens``, never splitting a token, continuation indented."""
    indent = " " * (len(first) + 1)
    lines, line = [], first
    for token in tokens:
        if len(line) + 1 + len(token) > width and line.strip() and line != first:
            lines.append(line)
            line = indent + token
        else:
            line += " " + token
    lines.append(line)
    return lines


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, never breaking an option or a word."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def _columns(rows: list[tuple[str, str]], width: int, labels: list[str] | None = None) -> list[str]:
    """Two columns, the second wrapped; a label too long for its column has its own line.
    ``labels``: every label of the screen, so that its sections line up."""
    column = min(LABEL_WIDTH, max(len(label) for label in (labels or [r[0] for r in rows]))) + 4
    narrow = width - column < 24  # too narrow for two columns: each description under its label
    if narrow:
        column = 6
    lines = []
    for label, text in rows:
        body = _wrap(text, width - column) or [""]
        if narrow or len(label) + 4 > column:
            lines.append(f"  {label}")
        else:
            lines.append(f"  {label:<{column - 2}}{body.pop(0)}")
        lines += [" " * column + part for part in body]
    return lines


def _number(value) -> str:
    return str(int(value)) if isinstance(value, float) and value == int(value) else str(value)


def describe(param: Param) -> str:
    """A parameter's help with what the reader needs next: required, default, range."""
    notes = []
    if param.required:
        notes.append("required")
    elif param.flag is None and param.dest == "text":
        notes.append("required unless --file is given")
    elif param.kind != "flag":
        value = default(param)
        if param.default_text:
            notes.append(f"default: {param.default_text}")
        elif param.default == FROM_SETTINGS:
            from cafleet.config import declared

            setting = declared(param.flag)
            notes.append(f"default: {setting.default_text or _number(value)}")
        elif value not in (None, []):
            notes.append(f"default: {_number(value)}")
    if param.kind in ("count", "seconds", "number"):
        from cafleet.config import declared

        notes.append(declared(param.flag).allowed())
    if param.kind == "id":
        notes.append("a positive integer")
    if param.kind == "multi":
        notes.append("repeatable")
    text = param.help
    return f"{text} ({'; '.join(notes)})" if notes else text


def _label(param: Param) -> str:
    if param.flag is None:
        return param.metavar
    return param.flag if param.kind == "flag" else f"{param.flag} {param.metavar}"


def command_help(command: Command, width: int | None = None) -> str:
    width = width or terminal_width()
    lines = _wrap_tokens("Usage:", [*usage_tokens(command), "[--json]"], width)
    lines += ["", *_wrap(command.summary, width)]
    arguments = [(_label(p), describe(p)) for p in command.params if p.flag is None]
    options = [(_label(p), describe(p)) for p in command.params if p.flag is not None]
    options += [("--json", JSON_HELP), ("-h, --help", HELP_HELP)]
    labels = [label for label, _ in arguments + options]
    if arguments:
        lines += ["", "Arguments:", *_columns(arguments, width, labels)]
    lines += ["", "Options:", *_columns(options, width, labels)]
    return "\n".join(lines)


def group_help(group: str, width: int | None = None) -> str:
    width = width or terminal_width()
    lines = [*_wrap_tokens("Usage:", ["cafleet", group, "COMMAND", "[ARGS]", "[--json]"], width), ""]
    lines += _wrap(GROUPS[group][0].upper() + GROUPS[group][1:] + ".", width)
    lines += ["", "Commands:"]
    lines += _columns([(c.name, c.summary) for c in COMMANDS if c.group == group], width)
    lines += ["", *_wrap(f"Run `cafleet {group} COMMAND --help` for a command's parameters.", width)]
    return "\n".join(lines)


def top_help(width: int | None = None) -> str:
    width = width or terminal_width()
    lines = [*_wrap_tokens("Usage:", ["cafleet", "GROUP", "[COMMAND]", "[ARGS]", "[--json]"], width), ""]
    lines += _wrap("Message broker and member registry for fleets of coding agents.", width)
    lines += ["", "Groups and commands:", *_columns(list(GROUPS.items()), width)]
    lines += [
        "",
        "Options:",
        *_columns(
            [("--version", "print the version"), ("-h, --help", "show help (also after any group or command)")], width
        ),
    ]
    return "\n".join(lines)


# --- the README's command reference ----------------------------------------------------------

REFERENCE_START = (
    "<!-- command reference: generated by `python -m cafleet.cli.helptext --write-readme README.md`; do not edit -->"
)
REFERENCE_END = "<!-- end of command reference -->"


def reference_markdown() -> str:
    """The command reference for the README (between REFERENCE_START and REFERENCE_END)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| Command | Does |", "| --- | --- |", "| `cafleet --version` | Print the version. |"]
    for command in COMMANDS:
        lines.append(f"| `{cell(' '.join(usage_tokens(command)))}` | {cell(command.summary)} |")
    lines += ["", "Parameters, their defaults and allowed values:", ""]
    for command in COMMANDS:
        if not command.params:
            continue
        words = "cafleet " + command.group + (f" {command.name}" if command.name else "")
        parts = [f"`{_label(p)}` {describe(p)}" for p in command.params]
        lines.append(f"- `{words}`: " + "; ".join(parts) + ".")
    return "\n".join(lines)


def replace_reference(readme: str) -> str:
    """``readme`` with the text between the markers replaced by :func:`reference_markdown`."""
    from cafleet.readme import replace_section

    return replace_section(readme, REFERENCE_START, REFERENCE_END, reference_markdown())


if __name__ == "__main__":
    import sys

    from cafleet.readme import generator_main

    raise SystemExit(generator_main(sys.argv[1:], "cafleet.cli.helptext", reference_markdown, replace_reference))
