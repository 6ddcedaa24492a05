"""Which permission rules in the coding agents' own settings would stop a member from
running the ``cafleet message`` commands it needs (``cafleet doctor``, docs/agents.md
"Permission rules that silence members").

A member that cannot run ``cafleet message poll`` never reads its task, and one that cannot
run ``cafleet message send`` never reports: the fleet stalls without a word. Each agent's
rules are read from the files that agent reads, in its own precedence, and evaluated the way
that agent evaluates them against the commands the skill tells a member to run
(:data:`MEMBER_COMMANDS`):

* claude: ``permissions.deny`` and ``permissions.ask`` in the managed settings
  (``/etc/claude-code/managed-settings.json`` and ``managed-settings.d/*.json``), the user's
  ``settings.json`` (``CLAUDE_CONFIG_DIR`` or ``~/.claude``) and the project's
  ``.claude/settings.json`` and ``.claude/settings.local.json``. A deny or ask rule wins over
  the ``--allowedTools`` rule a member is spawned with (members run in ``dontAsk`` mode, where
  *ask* means *refused*). ``allowManagedPermissionRulesOnly`` in managed settings makes claude
  ignore every rule but the managed ones, the spawn's ``--allowedTools`` included, so it is
  reported unless a managed ``allow`` rule covers the commands.
* codex: ``prefix_rule`` entries in ``$CODEX_HOME/rules/*.rules`` and in the project's
  ``.codex/rules/*.rules`` (from the repository's root down to the working directory); the
  strictest matching decision wins, so a ``forbidden`` or ``prompt`` rule beats the ``allow``
  rule that ``cafleet setup`` installs.
* opencode: the ``permission`` and ``agent.cafleet.permission`` entries of its config
  files, deep-merged in opencode's own order (global, ``OPENCODE_CONFIG``, the project's
  ``opencode.json``/``opencode.jsonc``, the config folders with their agent presets,
  ``OPENCODE_CONFIG_CONTENT``, ``/etc/opencode``); a member runs as the ``cafleet`` agent,
  whose rules are the general ones followed by the agent's own (the installed preset's
  ``allow`` among them), and the last matching rule wins. So a rule is reported only when
  it still decides after the preset's ``allow``: in practice one merged after the preset
  (``OPENCODE_CONFIG_CONTENT``, the managed files) or ``agent.cafleet.disable``. The
  preset is assumed installed (its absence is the assets section's finding).

A settings file that is not valid JSON (or a rules file codex cannot parse) is a finding too:
the agent ignores it or refuses to start. Reading only; nothing here writes a file.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

CLAUDE_MANAGED_DIR = Path("/etc/claude-code")
OPENCODE_MANAGED_DIR = Path("/etc/opencode")

MEMBER_COMMANDS: tuple[str, ...] = (
    "cafleet message send --from-member-id 3 --to-member-id 1 Done.",
    "cafleet message broadcast --from-member-id 3 Status?",
    "cafleet message poll 3",
    "cafleet message show 7",
    "cafleet message ack 7",
    "cafleet message wait 3 --timeout 300",
)
"""One example of each command a member must be able to run, as the skill spells them."""


@dataclass(frozen=True)
class Finding:
    """One rule (or one unreadable file) that would stop members' ``cafleet message`` commands."""

    coding_agent: str
    path: str
    rule: str  # the rule as written, e.g. 'permissions.deny "Bash(cafleet:*)"'; "" for an unreadable file
    problem: str  # what it does to members, one line
    commands: tuple[str, ...] = ()  # the ``cafleet message`` subcommands it stops

    def as_dict(self) -> dict:
        found = asdict(self)
        found["commands"] = list(self.commands)
        return found


def subcommand(command: str) -> str:
    return command.split()[2]


def findings(
    environ: Mapping[str, str],
    cwd: str,
    claude_managed: Path = CLAUDE_MANAGED_DIR,
    opencode_managed: Path = OPENCODE_MANAGED_DIR,
) -> list[Finding]:
    """Every finding for claude, codex and opencode members started in ``cwd`` under ``environ``."""
    project = Path(cwd)
    return [
        *claude_findings(environ, project, claude_managed),
        *codex_findings(environ, project),
        *opencode_findings(environ, project, opencode_managed),
    ]


# -- reading files -----------------------------------------------------------------------


def _home(environ: Mapping[str, str]) -> Path | None:
    home = environ.get("HOME")
    return Path(home) if home and os.path.isabs(home) else None


def _dir_from(environ: Mapping[str, str], name: str, *default: str) -> Path | None:
    value = environ.get(name)
    if value and os.path.isabs(value):
        return Path(value)
    home = _home(environ)
    return home.joinpath(*default) if home is not None else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise _Unreadable(f"cannot be read ({error.__class__.__name__}: {error})") from None


class _Unreadable(Exception):
    pass


def _load_json(text: str, comments: bool) -> object:
    try:
        return json.loads(_strip_jsonc(text) if comments else text)
    except ValueError as error:
        raise _Unreadable(f"is not valid JSON ({error})") from None


def _strip_jsonc(text: str) -> str:
    """``text`` without ``//`` and ``/* */`` comments and trailing commas (JSONC, as
    opencode reads its config), strings left intact."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif char in "}]":
            while out and out[-1].isspace():
                out.pop()
            if out and out[-1] == ",":
                out.pop()
            out.append(char)
            i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _ancestors(project: Path, marker: str = ".git") -> list[Path]:
    """``project`` and its parents up to the one holding ``marker`` (the repository's root),
    root first; only ``project`` when no parent holds it."""
    chain = [project, *project.parents]
    for index, directory in enumerate(chain):
        if (directory / marker).exists():
            return list(reversed(chain[: index + 1]))
    return [project]


# -- claude --------------------------------------------------------------------------------


def _claude_files(environ: Mapping[str, str], project: Path, managed: Path) -> list[tuple[Path, bool]]:
    """(settings file, managed?) in claude's order, lowest precedence first."""
    files: list[tuple[Path, bool]] = []
    user = _dir_from(environ, "CLAUDE_CONFIG_DIR", ".claude")
    if user is not None:
        files.append((user / "settings.json", False))
    files.append((project / ".claude" / "settings.json", False))
    files.append((project / ".claude" / "settings.local.json", False))
    files.append((managed / "managed-settings.json", True))
    try:
        drop_ins = sorted(p for p in (managed / "managed-settings.d").iterdir() if p.suffix == ".json")
    except OSError:
        drop_ins = []
    files.extend((p, True) for p in drop_ins if not p.name.startswith("."))
    return files


def _claude_rule_matches(rule: str, command: str) -> bool:
    """Whether claude's permission rule ``rule`` (``Bash``, ``Bash(*)``, ``Bash(prefix:*)``,
    ``Bash(pattern with * wildcards)`` or an exact command) covers ``command``."""
    rule = rule.strip()
    if rule == "Bash":
        return True
    if not (rule.startswith("Bash(") and rule.endswith(")")):
        return False
    content = rule[5:-1].strip()
    if content in ("", "*"):
        return True
    if content.endswith(":*"):  # the older prefix form
        prefix = content[:-2].rstrip()
        return command == prefix or command.startswith(prefix + " ")
    if "*" not in content:
        return command == content
    if content.endswith(" *") and command == content[:-2]:
        return True  # "cafleet *" also covers the bare "cafleet"
    return _wildcard(content, command)


def _wildcard(pattern: str, text: str) -> bool:
    """``*`` matches any run of characters (spaces too); everything else literally."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return text == pattern
    if not text.startswith(parts[0]):
        return False
    position = len(parts[0])
    for part in parts[1:-1]:
        found = text.find(part, position)
        if found < 0:
            return False
        position = found + len(part)
    last = parts[-1]
    return len(text) - position >= len(last) and text.endswith(last)


def _stopping(agent: str, path: Path, rule: str, effect: str, matches: Callable[[str], bool]) -> list[Finding]:
    """A finding for ``rule`` in ``path`` when it stops any member command (``matches``),
    else none."""
    stopped = tuple(subcommand(c) for c in MEMBER_COMMANDS if matches(c))
    return [Finding(agent, str(path), rule, effect, stopped)] if stopped else []


def claude_findings(environ: Mapping[str, str], project: Path, managed: Path = CLAUDE_MANAGED_DIR) -> list[Finding]:
    out: list[Finding] = []
    managed_only: Path | None = None
    managed_allow: list[str] = []
    for path, is_managed in _claude_files(environ, project, managed):
        try:
            text = _read(path)
            if text is None:
                continue
            settings = _load_json(text, comments=False)
        except _Unreadable as error:
            out.append(Finding("claude", str(path), "", f"{error}: claude ignores it or refuses to start"))
            continue
        if not isinstance(settings, dict):
            out.append(Finding("claude", str(path), "", "is not a JSON object: claude ignores it"))
            continue
        permissions = settings.get("permissions")
        if is_managed and settings.get("allowManagedPermissionRulesOnly") is True:
            managed_only = path
        if not isinstance(permissions, dict):
            continue
        if is_managed and isinstance(permissions.get("allow"), list):
            managed_allow.extend(r for r in permissions["allow"] if isinstance(r, str))
        for kind in ("deny", "ask"):
            rules = permissions.get(kind)
            for rule in rules if isinstance(rules, list) else ():
                if not isinstance(rule, str):
                    continue
                effect = "refuses" if kind == "deny" else "asks before (refused in a member's dontAsk mode)"
                out.extend(
                    _stopping(
                        "claude",
                        path,
                        f"permissions.{kind} {json.dumps(rule)}",
                        f"{effect} `cafleet message` commands",
                        partial(_claude_rule_matches, rule),
                    )
                )
    if managed_only is not None:
        uncovered = tuple(
            subcommand(c) for c in MEMBER_COMMANDS if not any(_claude_rule_matches(r, c) for r in managed_allow)
        )
        if uncovered:
            out.append(
                Finding(
                    "claude",
                    str(managed_only),
                    "allowManagedPermissionRulesOnly: true",
                    "makes claude ignore the spawn's --allowedTools rule, and no managed allow rule covers `cafleet message`",
                    uncovered,
                )
            )
    return out


# -- codex ---------------------------------------------------------------------------------

_STRICTNESS = {"allow": 0, "prompt": 1, "forbidden": 2}


def _codex_rule_files(environ: Mapping[str, str], project: Path) -> list[Path]:
    directories = []
    home = _dir_from(environ, "CODEX_HOME", ".codex")
    if home is not None:
        directories.append(home / "rules")
    directories.extend(d / ".codex" / "rules" for d in _ancestors(project))
    files: list[Path] = []
    for directory in directories:
        try:
            files.extend(sorted(p for p in directory.iterdir() if p.suffix == ".rules"))
        except OSError:
            continue
    return files


def _prefix_rules(path: Path, text: str) -> Iterator[tuple[list, str, int]]:
    """(pattern, decision, line) of each ``prefix_rule(...)`` call in a codex rules file."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as error:
        raise _Unreadable(f"cannot be parsed (line {error.lineno}: {error.msg})") from None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "prefix_rule"):
            continue
        arguments = {k.arg: k.value for k in node.keywords if k.arg}
        try:
            pattern = ast.literal_eval(arguments["pattern"]) if "pattern" in arguments else None
            decision = ast.literal_eval(arguments["decision"]) if "decision" in arguments else "allow"
        except ValueError:
            continue  # computed values: not ours to evaluate
        if isinstance(pattern, list) and isinstance(decision, str):
            yield pattern, decision, node.lineno


def _codex_pattern_matches(pattern: list, command: str) -> bool:
    words = shlex.split(command)
    if len(words) < len(pattern):
        return False
    for token, word in zip(pattern, words, strict=False):
        choices = token if isinstance(token, list) else [token]
        if word not in choices:
            return False
    return bool(pattern)


def codex_findings(environ: Mapping[str, str], project: Path) -> list[Finding]:
    out: list[Finding] = []
    for path in _codex_rule_files(environ, project):
        try:
            text = _read(path)
            if text is None:
                continue
            rules = list(_prefix_rules(path, text))
        except _Unreadable as error:
            out.append(Finding("codex", str(path), "", f"{error}: codex refuses to load its rules"))
            continue
        for pattern, decision, line in rules:
            if _STRICTNESS.get(decision, 0) == 0:
                continue
            effect = "forbids" if decision == "forbidden" else "prompts for"
            out.extend(
                _stopping(
                    "codex",
                    path,
                    f"line {line}: prefix_rule(pattern={json.dumps(pattern)}, decision={json.dumps(decision)})",
                    f"{effect} `cafleet message` commands (the strictest matching rule wins over cafleet's allow)",
                    partial(_codex_pattern_matches, pattern),
                )
            )
    return out


# -- opencode ------------------------------------------------------------------------------

PRESET = "the cafleet agent preset"
PRESET_PERMISSION = {"bash": {"cafleet message *": "allow"}}
"""The ``permission`` of the ``cafleet`` agent preset that ``cafleet setup`` installs."""


def _opencode_sources(environ: Mapping[str, str], project: Path, managed: Path) -> Iterator[tuple[str, Path | str]]:
    """(where, file or inline text) of each config opencode 1.18 merges, in its order:
    the global files, ``OPENCODE_CONFIG``, the project's files (root first), then each config
    directory (the global one, the project's ``.opencode`` folders nearest first,
    ``~/.opencode``, ``OPENCODE_CONFIG_DIR``) with its ``opencode.json`` (``.opencode`` and
    ``OPENCODE_CONFIG_DIR`` only) and then its agent presets, then
    ``OPENCODE_CONFIG_CONTENT`` and the managed files. The cafleet preset appears as
    :data:`PRESET` where ``cafleet setup`` installs it, installed or not: a missing preset is
    the assets section's finding, and the rules are judged as members will meet them."""
    names = ("opencode.json", "opencode.jsonc")
    config = _dir_from(environ, "XDG_CONFIG_HOME", ".config")
    home = _home(environ)
    preset_dir = _dir_from(environ, "OPENCODE_CONFIG_DIR", ".opencode")
    if config is not None:
        for name in ("config.json", *names):
            yield str(config / "opencode" / name), config / "opencode" / name
    if environ.get("OPENCODE_CONFIG"):
        yield environ["OPENCODE_CONFIG"], Path(environ["OPENCODE_CONFIG"])
    for directory in _ancestors(project):
        for name in names:
            yield str(directory / name), directory / name
    directories = [config / "opencode"] if config is not None else []
    directories.extend(d / ".opencode" for d in reversed(_ancestors(project)))
    if home is not None:
        directories.append(home / ".opencode")
    if environ.get("OPENCODE_CONFIG_DIR"):
        directories.append(Path(environ["OPENCODE_CONFIG_DIR"]))
    for directory in directories:
        if directory.name == ".opencode" or str(directory) == environ.get("OPENCODE_CONFIG_DIR"):
            for name in names:
                yield str(directory / name), directory / name
        if directory == preset_dir:  # where `cafleet setup` installs it (its absence is doctor's assets finding)
            yield PRESET, PRESET
    if environ.get("OPENCODE_CONFIG_CONTENT"):
        yield "OPENCODE_CONFIG_CONTENT", environ["OPENCODE_CONFIG_CONTENT"]
    for name in names:
        yield str(managed / name), managed / name


def _merge(into: object, value: object, where: str, origin: dict) -> object:
    """opencode's deep merge of one ``permission`` value into ``into``: objects merge key by
    key (a key keeps its first place), anything else replaces. ``origin`` mirrors the result
    with the source that wrote each rule last."""
    if not isinstance(value, dict):
        origin.clear()
        origin[()] = where
        return value
    if not isinstance(into, dict):
        into = {}
        origin.clear()
    for key, item in value.items():
        if isinstance(item, dict):
            current = into.get(key)
            if not isinstance(current, dict):
                current, origin[key] = {}, {}
            for pattern, action in item.items():
                current[pattern] = action
                origin[key][pattern] = where
            into[key] = current
        else:
            into[key] = item
            origin[key] = where
    return into


def _flatten(permission: object, origin: dict) -> Iterator[tuple[str, str, str, str]]:
    """(permission, pattern, action, where) in order, as opencode's ``fromConfig`` flattens."""
    if isinstance(permission, str):
        yield "*", "*", permission, str(origin.get((), ""))
        return
    if not isinstance(permission, dict):
        return
    for key, value in permission.items():
        if isinstance(value, str):
            yield key, "*", value, str(origin.get(key, ""))
        elif isinstance(value, dict):
            branch = origin.get(key)
            for pattern, action in value.items():
                if isinstance(action, str):
                    yield key, pattern, action, str(branch.get(pattern, "") if isinstance(branch, dict) else "")


def _opencode_matches(permission: str, pattern: str, command: str) -> bool:
    if not _wildcard(permission, "bash"):
        return False
    if pattern.endswith(" *") and command == pattern[:-2]:
        return True
    return _wildcard(pattern, command)


def opencode_findings(environ: Mapping[str, str], project: Path, managed: Path = OPENCODE_MANAGED_DIR) -> list[Finding]:
    out: list[Finding] = []
    general: object = {}
    agent: object = {}
    general_origin: dict = {}
    agent_origin: dict = {}
    disabled: str | None = None
    for where, source in _opencode_sources(environ, project, managed):
        if source is PRESET:
            agent = _merge(agent, PRESET_PERMISSION, PRESET, agent_origin)
            continue
        try:
            text = _read(source) if isinstance(source, Path) else source
            if text is None:
                continue
            config = _load_json(text, comments=True)
        except _Unreadable as error:
            out.append(Finding("opencode", where, "", f"{error}: opencode refuses to start"))
            continue
        if not isinstance(config, dict):
            continue
        if "permission" in config:
            general = _merge(general, config["permission"], where, general_origin)
        agents = config.get("agent")
        preset = agents.get("cafleet") if isinstance(agents, dict) else None
        if isinstance(preset, dict):
            if preset.get("disable") is True:
                disabled = where
            if "permission" in preset:
                agent = _merge(agent, preset["permission"], where, agent_origin)
    if disabled is not None:
        out.append(
            Finding(
                "opencode",
                disabled,
                'agent {"cafleet": {"disable": true}}',
                "removes the cafleet agent that members run as",
                tuple(subcommand(c) for c in MEMBER_COMMANDS),
            )
        )
    return out + _opencode_blocking([*_flatten(general, general_origin), *_flatten(agent, agent_origin)])


def _opencode_blocking(ordered: list) -> list[Finding]:
    """A finding per rule that, as the last one matching, denies or asks before a member's
    `cafleet message` commands (``ordered``: every rule, lowest precedence first)."""
    out: list[Finding] = []
    blocking: dict[tuple[str, str, str, str], list[str]] = {}
    for command in MEMBER_COMMANDS:
        deciding = None
        for rule in ordered:
            if _opencode_matches(rule[0], rule[1], command):
                deciding = rule
        if deciding is not None and deciding[2] in ("deny", "ask"):
            blocking.setdefault(deciding, []).append(subcommand(command))
    for (permission, pattern, action, where), stopped in blocking.items():
        effect = "denies" if action == "deny" else "asks before"
        out.append(
            Finding(
                "opencode",
                where,
                f"permission {json.dumps({permission: {pattern: action}})}",
                f"{effect} `cafleet message` commands (the last matching rule, after the cafleet preset's allow)",
                tuple(stopped),
            )
        )
    return out
