"""A small declarative argument parser for the command table.

Written for start-up time: it imports nothing beyond the command table, where a general
CLI framework costs several times a bare interpreter's start on every one of the hundreds
of calls an agent makes in a session (see docs/performance.md). What a framework would add
lives off the hot path: the help (:mod:`cafleet.cli.helptext`) is imported only for
``--help``, and ``difflib`` only to suggest a spelling after an unknown command or option.

Every parameter reaches its handler: a parameter not given gets the default declared in
the table (a numeric option's comes from its declaration in :mod:`cafleet.config`).

A token that starts with ``-`` is an option when the command knows it; otherwise it is the
positional text when it contains whitespace (``"- item one"``, a Markdown list, cannot be
an option), and an error that says how to pass such text (after ``--``, or with ``--file``)
when it does not.
"""

from __future__ import annotations

from cafleet.cli.table import COMMANDS, GROUPS, Command, Param, default
from cafleet.errors import UsageError, shown


class Parsed:
    __slots__ = ("command", "help", "json", "values")

    def __init__(self, command, values, json_output, help_text):
        self.command = command
        self.values = values
        self.json = json_output
        self.help = help_text


HELP = ("-h", "--help")


def find_command(group: str, name: str | None) -> Command | None:
    for command in COMMANDS:
        if command.group == group and command.name == name:
            return command
    return None


def _help(kind: str, *args) -> Parsed:
    from cafleet.cli import helptext

    return Parsed(args[0] if kind == "command" else None, {}, False, getattr(helptext, kind + "_help")(*args))


def _convert(param, raw: str, where: str):
    kind = param.kind
    if kind == "id":
        from cafleet.validation import parse_id

        return parse_id(raw, where)
    if kind in ("count", "seconds", "number"):  # bounded by its declaration in cafleet.config
        from cafleet.config import option

        return option(where, raw)
    if param.choices and raw not in param.choices:
        raise UsageError(f"{where} must be one of {', '.join(param.choices)}, got {shown(raw)}.")
    return raw


def parse(argv: list[str]) -> Parsed:
    """Parse argv (without the program name). Help requests return Parsed with .help set."""
    if not argv or argv[0] in (*HELP, "help"):
        return _help("top")
    group = argv[0]
    if group not in GROUPS:
        raise UsageError(
            f"unknown command {shown(group)}; "
            + _did_you_mean(group, GROUPS, "`cafleet {}`", "run `cafleet --help` for the list.")
        )
    rest = argv[1:]
    command = find_command(group, None)
    if command is None:
        if not rest or rest[0] in HELP:
            return _help("group", group)
        command = find_command(group, rest[0])
        if command is None:
            names = [c.name for c in COMMANDS if c.group == group]
            raise UsageError(
                f"unknown command {group} {shown(rest[0])}; "
                + _did_you_mean(
                    rest[0], names, f"`cafleet {group} {{}}`", f"run `cafleet {group} --help` for the list."
                )
            )
        rest = rest[1:]
    return _parse_params(command, rest)


def _parse_params(command: Command, args: list[str]) -> Parsed:
    name = f"cafleet {command.group}" + (f" {command.name}" if command.name else "")
    values: dict = {p.dest: default(p) for p in command.params}
    scanned = _scan(command, name, args, values)
    if scanned is None:
        return _help("command", command)
    json_output, given_positionals = scanned
    _place_positionals(command, name, given_positionals, values)
    for param in command.params:
        if param.required and values[param.dest] is None:
            what = param.metavar if param.flag is None else f"option {param.flag} {param.metavar}"
            raise UsageError(f"missing {what}; see `{name} --help`.")
    return Parsed(command, values, json_output, None)


def _scan(command: Command, name: str, args: list[str], values: dict) -> tuple[bool, list[str]] | None:
    """The options of ``args`` converted into ``values``; (``--json`` given, the positional
    arguments), or None when help was asked for."""
    options = {p.flag: p for p in command.params if p.flag}
    given: set[str] = set()
    json_output = False
    positionals: list[str] = []
    i = 0
    only_positionals = False
    while i < len(args):
        token = args[i]
        i += 1
        if only_positionals or token == "-" or not token.startswith("-") or _looks_negative_number(token):
            positionals.append(token)
            continue
        if token == "--":
            only_positionals = True
            continue
        if token in HELP:
            return None
        flag, has_value, inline = token.partition("=")
        if flag == "--json" and not has_value:
            json_output = True
            continue
        param = options.get(flag)
        if param is None:
            if any(c.isspace() for c in token):  # "- item one" cannot be an option: it is text
                positionals.append(token)
                continue
            raise _unknown_option(command, name, flag)
        if param.kind == "flag":
            if has_value:
                raise UsageError(f"option {flag} takes no value.")
            values[param.dest] = True
            continue
        if not has_value:
            if i >= len(args):
                raise UsageError(f"option {flag} needs a value ({param.metavar}).")
            inline = args[i]
            i += 1
        _set_option(param, flag, inline, values, given)
    return json_output, positionals


def _set_option(param: Param, flag: str, raw: str, values: dict, given: set[str]) -> None:
    """An option's value converted into ``values`` (a repeatable one appended)."""
    if param.kind == "multi":
        values[param.dest].append(_convert(param, raw, flag))
        return
    if flag in given:
        raise UsageError(f"option {flag} was given more than once.")
    given.add(flag)
    values[param.dest] = _convert(param, raw, flag)


def _place_positionals(command: Command, name: str, given: list[str], values: dict) -> None:
    positionals = [p for p in command.params if p.flag is None]
    if len(given) > len(positionals):
        extra = given[len(positionals)]
        hint = " (quote a message body so that it is one argument)" if command.body else ""
        raise UsageError(f"unexpected argument {shown(extra)} for `{name}`{hint}.")
    for param, raw in zip(positionals, given):
        values[param.dest] = _convert(param, raw, param.metavar)


def _looks_negative_number(token: str) -> bool:
    return len(token) > 1 and token[0] == "-" and token[1:].replace(".", "", 1).isdigit()


# --- the error path -------------------------------------------------------------------------


def suggestions(word: str, candidates) -> list[str]:
    """Known words close to ``word``, best first: those it begins (``--from`` ->
    ``--from-member-id``), else those that hold its letters in order and start alike
    (``msg`` -> ``message``, ``--frm`` -> ``--from-member-id``), else close spellings
    (``sned`` -> ``send``)."""
    candidates = list(candidates)
    letters = word.lstrip("-")
    if len(letters) >= 2:
        started = [c for c in candidates if c.startswith(word)]
        if started:
            return started
    if len(letters) >= 3:
        held = [c for c in candidates if c.lstrip("-")[:1] == letters[0] and _holds(c.lstrip("-"), letters)]
        if held:
            return held
    import difflib

    return difflib.get_close_matches(word, candidates, n=3, cutoff=0.6)


def _holds(text: str, letters: str) -> bool:
    """Whether ``letters`` appear in ``text`` in order."""
    rest = iter(text)
    return all(letter in rest for letter in letters)


def _did_you_mean(word: str, candidates, form: str, otherwise: str) -> str:
    found = suggestions(word, candidates)
    if not found:
        return otherwise
    return "did you mean " + " or ".join(form.format(c) for c in found) + "?"


def _unknown_option(command: Command, name: str, flag: str) -> UsageError:
    message = f"unknown option {shown(flag)} for `{name}`; "
    known = [p.flag for p in command.params if p.flag] + ["--json", "--help"]
    found = suggestions(flag, known)
    if found:
        return UsageError(message + "did you mean " + " or ".join(found) + "?")
    text = [p for p in command.params if p.flag is None and p.kind == "text" and p.metavar == "TEXT"]
    if not text:
        return UsageError(message + f"see `{name} --help`.")
    where = "after `--` (or in a file given with --file)" if command.body else "after `--`"
    return UsageError(message + f"a TEXT that starts with '-' goes {where}, and `{name} --help` lists the options.")
