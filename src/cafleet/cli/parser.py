"""A small declarative argument parser for the command table.

Written for start-up time: it imports nothing beyond the command table, where a general
CLI framework costs several times a bare interpreter's start on every one of the hundreds
of calls an agent makes in a session (see docs/performance.md).
"""

from __future__ import annotations

from cafleet.cli.table import COMMANDS, GROUPS, Command
from cafleet.errors import UsageError, shown


class Parsed:
    __slots__ = ("command", "values", "json", "help")

    def __init__(self, command, values, json_output, help_text):
        self.command = command
        self.values = values
        self.json = json_output
        self.help = help_text


def find_command(group: str, name: str | None) -> Command | None:
    for command in COMMANDS:
        if command.group == group and command.name == name:
            return command
    return None


def usage_line(command: Command) -> str:
    words = ["cafleet", command.group] + ([command.name] if command.name else [])
    for param in command.params:
        if param.flag is None:
            if command.body and param.dest == "text":
                words.append("(TEXT | --file PATH)")
            else:
                words.append(param.metavar if param.required else f"[{param.metavar}]")
    for param in command.params:
        if param.flag is None or (command.body and param.dest == "file"):
            continue
        token = param.flag if param.kind == "flag" else f"{param.flag} {param.metavar}"
        words.append(token if param.required else f"[{token}]")
    words.append("[--json]")
    return " ".join(words)


def command_help(command: Command) -> str:
    lines = [f"Usage: {usage_line(command)}", "", command.summary]
    described = [p for p in command.params if p.help]
    if described:
        lines.append("")
        for param in described:
            label = param.metavar if param.flag is None else param.flag
            if param.flag and param.kind != "flag":
                label += f" {param.metavar}"
            lines.append(f"  {label:<24} {param.help}")
    lines.append(f"  {'--json':<24} print one JSON document instead of text")
    return "\n".join(lines)


def group_help(group: str) -> str:
    lines = [f"Usage: cafleet {group} COMMAND [ARGS] [--json]", "", GROUPS[group].capitalize() + ".", "", "Commands:"]
    for command in COMMANDS:
        if command.group == group:
            lines.append(f"  {command.name:<10} {command.summary}")
    return "\n".join(lines)


def top_help() -> str:
    lines = [
        "Usage: cafleet GROUP [COMMAND] [ARGS] [--json]",
        "",
        "Message broker and member registry for fleets of coding agents.",
        "",
        "Groups and commands:",
    ]
    for group, summary in GROUPS.items():
        lines.append(f"  {group:<10} {summary}")
    lines += ["", "Options:", "  --version  print the version", "  --help     show help (also after any command)"]
    return "\n".join(lines)


def _convert(param, raw: str, where: str):
    kind = param.kind
    if kind == "id":
        from cafleet.validation import parse_id

        return parse_id(raw, where)
    if kind in ("count", "seconds"):  # bounded by its declaration in cafleet.config
        from cafleet.config import option

        return option(where, raw)
    if param.choices and raw not in param.choices:
        raise UsageError(f"{where} must be one of {', '.join(param.choices)}, got {shown(raw)}.")
    return raw


def parse(argv: list[str]) -> Parsed:
    """Parse argv (without the program name). Help requests return Parsed with .help set."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        return Parsed(None, {}, False, top_help())
    group = argv[0]
    if group not in GROUPS:
        raise UsageError(f"unknown command {shown(group)}; run `cafleet --help` for the list.")
    rest = argv[1:]
    command = find_command(group, None)
    if command is None:
        if not rest or rest[0] in ("-h", "--help"):
            return Parsed(None, {}, False, group_help(group))
        command = find_command(group, rest[0])
        if command is None:
            raise UsageError(f"unknown command {group} {shown(rest[0])}; run `cafleet {group} --help` for the list.")
        rest = rest[1:]
    return _parse_params(command, rest)


def _parse_params(command: Command, args: list[str]) -> Parsed:
    options = {p.flag: p for p in command.params if p.flag}
    positionals = [p for p in command.params if p.flag is None]
    values: dict = {p.dest: ([] if p.kind == "multi" else (False if p.kind == "flag" else None)) for p in command.params}
    json_output = False
    given_positionals: list[str] = []
    seen_options: set[str] = set()
    name = f"cafleet {command.group}" + (f" {command.name}" if command.name else "")
    i = 0
    only_positionals = False
    while i < len(args):
        token = args[i]
        i += 1
        if only_positionals or token == "-" or not token.startswith("-") or _looks_negative_number(token):
            given_positionals.append(token)
            continue
        if token == "--":
            only_positionals = True
            continue
        if token in ("-h", "--help"):
            return Parsed(command, {}, False, command_help(command))
        flag, has_value, inline = token.partition("=")
        if flag == "--json" and not has_value:
            json_output = True
            continue
        param = options.get(flag)
        if param is None:
            raise UsageError(f"unknown option {shown(flag)} for `{name}`; see `{name} --help`.")
        if param.kind == "flag":
            if has_value:
                raise UsageError(f"option {flag} takes no value.")
            values[param.dest] = True
            continue
        if has_value:
            raw = inline
        else:
            if i >= len(args):
                raise UsageError(f"option {flag} needs a value ({param.metavar}).")
            raw = args[i]
            i += 1
        if param.kind == "multi":
            values[param.dest].append(_convert(param, raw, flag))
            continue
        if flag in seen_options:
            raise UsageError(f"option {flag} was given more than once.")
        seen_options.add(flag)
        values[param.dest] = _convert(param, raw, flag)
    if len(given_positionals) > len(positionals):
        extra = given_positionals[len(positionals)]
        hint = " (quote a message body so that it is one argument)" if command.body else ""
        raise UsageError(f"unexpected argument {shown(extra)} for `{name}`{hint}.")
    for param, raw in zip(positionals, given_positionals):
        values[param.dest] = _convert(param, raw, param.metavar)
    for param in command.params:
        if param.required and values[param.dest] is None:
            what = param.metavar if param.flag is None else f"option {param.flag} {param.metavar}"
            raise UsageError(f"missing {what}; see `{name} --help`.")
    return Parsed(command, values, json_output, None)


def _looks_negative_number(token: str) -> bool:
    return len(token) > 1 and token[0] == "-" and token[1:].replace(".", "", 1).isdigit()
