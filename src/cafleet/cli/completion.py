"""`cafleet completion bash|zsh|fish`: a static completion script generated from the
command table, so it completes exactly the commands and options this version has.

    source <(cafleet completion bash)                            # in ~/.bashrc
    source <(cafleet completion zsh)                             # in ~/.zshrc, after compinit
    cafleet completion fish > ~/.config/fish/completions/cafleet.fish

The scripts complete groups, commands, options and the values of options that have a fixed
set (``completion``'s SHELL); ``--file`` completes file names. Ids are not completed: that
would need the database on every key press.
"""

from __future__ import annotations

from collections.abc import Callable

from cafleet.cli.table import COMMANDS, GROUPS, Command

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context

TOP_OPTIONS = ("--help", "--version")


def _key(command: Command) -> str:
    return command.group + (f" {command.name}" if command.name else "")


def _words(command: Command) -> list[str]:
    """What may come next on the command line: options, then a positional's fixed values."""
    words = [p.flag for p in command.params if p.flag] + ["--json", "--help"]
    for param in command.params:
        if param.flag is None and param.choices:
            words += list(param.choices)
    return words


def _valued(command: Command) -> list[str]:
    return [p.flag for p in command.params if p.flag and p.kind != "flag"]


def _subcommands() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for command in COMMANDS:
        if command.name:
            found.setdefault(command.group, []).append(command.name)
    return found


def _group_arms(test: str, offer: Callable[[str], str], stop: str, second: str) -> list[str]:
    """The arms of a bash or zsh script's first ``case``: after a group's name, offer its
    subcommands (``offer``); after a subcommand, make the key ``group subcommand``."""
    lines = []
    for group, names in _subcommands().items():
        lines += [
            f"        {group})",
            f"            if {test}; then",
            f"                {offer(' '.join([*names, '--help']))}",
            f"                {stop}",
            "            fi",
            f'            key="$key {second}" ;;',
        ]
    return lines


def bash() -> str:
    lines = [
        "# cafleet completion for bash: source <(cafleet completion bash)",
        "_cafleet() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local key="${COMP_WORDS[1]}" words="" valued=""',
        '    if [ "$COMP_CWORD" -eq 1 ]; then',
        f'        COMPREPLY=($(compgen -W "{" ".join([*GROUPS, *TOP_OPTIONS])}" -- "$cur"))',
        "        return 0",
        "    fi",
        '    case "$key" in',
    ]
    lines += _group_arms(
        '[ "$COMP_CWORD" -eq 2 ]',
        lambda words: f'COMPREPLY=($(compgen -W "{words}" -- "$cur"))',
        "return 0",
        "${COMP_WORDS[2]}",
    )
    lines += ["    esac", '    case "$key" in']
    for command in COMMANDS:
        lines.append(
            f'        "{_key(command)}") words="{" ".join(_words(command))}"; '
            f'valued=" {" ".join(_valued(command))} " ;;'
        )
    lines += [
        "        *) return 0 ;;",
        "    esac",
        '    if [ "$prev" = "--file" ] && [[ "$valued" == *" --file "* ]]; then',
        '        COMPREPLY=($(compgen -f -- "$cur"))',
        "        return 0",
        "    fi",
        '    if [[ "$prev" == --* && "$valued" == *" $prev "* ]]; then',
        "        return 0",
        "    fi",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "complete -F _cafleet cafleet",
    ]
    return "\n".join(lines) + "\n"


def zsh() -> str:
    lines = [
        "#compdef cafleet",
        "# cafleet completion for zsh: source <(cafleet completion zsh) after compinit",
        "_cafleet() {",
        "    local key=${words[2]} prev=${words[CURRENT-1]}",
        "    local -a next valued",
        "    if (( CURRENT == 2 )); then",
        f"        compadd -- {' '.join([*GROUPS, *TOP_OPTIONS])}",
        "        return",
        "    fi",
        "    case $key in",
    ]
    lines += _group_arms("(( CURRENT == 3 ))", lambda words: f"compadd -- {words}", "return", "${words[3]}")
    lines += ["    esac", "    case $key in"]
    for command in COMMANDS:
        lines.append(
            f"        '{_key(command)}') next=({' '.join(_words(command))}); valued=({' '.join(_valued(command))}) ;;"
        )
    lines += [
        "        *) return ;;",
        "    esac",
        "    if [[ $prev == --file ]] && (( ${valued[(Ie)--file]} )); then",
        "        _files",
        "        return",
        "    fi",
        "    if (( ${valued[(Ie)$prev]} )); then",
        "        return",
        "    fi",
        "    compadd -- $next",
        "}",
        "if (( $+functions[compdef] )); then compdef _cafleet cafleet; fi",
    ]
    return "\n".join(lines) + "\n"


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish() -> str:
    subcommands = _subcommands()
    lines = [
        "# cafleet completion for fish: cafleet completion fish > ~/.config/fish/completions/cafleet.fish",
        "function __cafleet_at --description 'true when the words after cafleet are exactly the arguments'",
        "    set -l words (commandline -opc)",
        "    set -e words[1]",
        "    test (count $words) -eq (count $argv); or return 1",
        "    for i in (seq (count $argv))",
        '        test "$words[$i]" = "$argv[$i]"; or return 1',
        "    end",
        "end",
        "function __cafleet_in --description 'true when the command line starts with cafleet and the arguments'",
        "    set -l words (commandline -opc)",
        "    set -e words[1]",
        "    test (count $words) -ge (count $argv); or return 1",
        "    for i in (seq (count $argv))",
        '        test "$words[$i]" = "$argv[$i]"; or return 1',
        "    end",
        "end",
        "complete -c cafleet -f",
    ]
    for group, summary in GROUPS.items():
        lines.append(f"complete -c cafleet -n '__cafleet_at' -a {group} -d {_fish_quote(summary)}")
    lines.append("complete -c cafleet -n '__cafleet_at' -l version -d 'print the version'")
    for group in subcommands:
        for command in COMMANDS:
            if command.group == group:
                lines.append(
                    f"complete -c cafleet -n '__cafleet_at {group}' -a {command.name} -d {_fish_quote(command.summary)}"
                )
    for command in COMMANDS:
        where = f"-n '__cafleet_in {_key(command)}'"
        for param in command.params:
            if param.flag:
                mode = " -r -F" if param.flag == "--file" else (" -x" if param.kind != "flag" else "")
                lines.append(f"complete -c cafleet {where} -l {param.flag[2:]}{mode} -d {_fish_quote(param.help)}")
            elif param.choices:
                lines.append(f"complete -c cafleet {where} -a {_fish_quote(' '.join(param.choices))}")
        lines.append(f"complete -c cafleet {where} -l json -d 'print one JSON document instead of text'")
    lines.append("complete -c cafleet -s h -l help -d 'show help'")
    return "\n".join(lines) + "\n"


SCRIPTS = {"bash": bash, "zsh": zsh, "fish": fish}


def completion(ctx: Context, shell):
    script = SCRIPTS[shell]()
    ctx.emit({"shell": shell, "script": script}, script.rstrip("\n"))
