"""`cafleet doctor`: five sections — multiplexer, database, coding agents, assets, member
permissions (rules in the agents' settings that would stop members' ``cafleet message``
commands) — each ✓/✗ with a one-line fix, a sixth, hosts, when members live on other hosts (or ``--host``
names some): each host's reachability over SSH, its tmux and its coding agents, and a
seventh, memory: each host's available memory and how many more members of each agent fit
there (this machine's read from /proc/meminfo, the hosts' within the hosts section's own SSH
call), an eighth, keepers, when there are live fleets: whether each one's keeper runs (pid,
since), and warnings about members' git worktrees when some need a hand (docs/worktrees.md).
Exit 0 when every section is healthy, 1 otherwise (the memory and worktree warnings never
fail it)."""

from __future__ import annotations

import os

from cafleet.errors import CafleetError, ExitCode, shown
from cafleet.render import inline

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context
    from cafleet.store.protocol import Trigger


def multiplexer_section(environ) -> dict:
    from cafleet.mux.detect import detect_backend, multiplexer_for_environment

    try:
        backend = detect_backend(environ)
        pane = multiplexer_for_environment(environ).current_pane()
    except CafleetError as error:
        return {"ok": False, "error": str(error), "fix": "run cafleet inside a tmux or herdr pane"}
    return {
        "ok": True,
        "backend": backend,
        "session": pane.session,
        "window_id": pane.window_id,
        "pane_id": pane.pane_id,
    }


def database_section(ctx: Context) -> dict:
    try:
        path = ctx.database
    except CafleetError as error:
        return {"ok": False, "path": None, "error": str(error), "fix": "set CAFLEET_DATABASE_URL to an absolute path"}
    from cafleet.store.engines import shown_location

    path = shown_location(path)  # never print a password
    try:
        store = ctx.store()
    except CafleetError as error:
        return {"ok": False, "path": path, "error": str(error), "fix": _database_fix(error)}
    problems = store.auxiliary_problems()
    triggers = store.triggers_and_rules()
    path = store.display_name  # a URL without its password
    from cafleet.store.schema import AUX_TABLES

    indexes = {name: problem for name, problem in problems.items() if name not in AUX_TABLES}
    tables = {name: problem for name, problem in problems.items() if name in AUX_TABLES}
    section = {
        "ok": True,
        "path": path,
        "diagnosis": "current format (schema 1)",
        "auxiliary_indexes": indexes,
        "auxiliary_tables": tables,
    }
    advice = [ADVICE["index", p] for p in sorted(set(indexes.values()))]
    advice += [ADVICE["table", p] for p in sorted(set(tables.values()))]
    if advice:  # the auxiliaries are optional: reported, never a failure
        section["advice"] = "; ".join(advice)
    if triggers is not None:
        section["triggers"] = triggers
        foreign = [t for t in triggers if t["foreign"]]
        if foreign:  # another role's code runs on every write to a table of messages
            first = foreign[0]
            section["ok"] = False
            section["error"] = (
                f"{trigger_text(first)}, a role that neither connects nor is the trusted owner "
                f"(CAFLEET_PG_TRUSTED_OWNER): every write to {first['table']} runs that role's code"
            )
            section["fix"] = (
                f"DROP TRIGGER {_ident(first['name'])} ON {_ident(store.schema)}.{_ident(first['table'])}, "
                f"or REVOKE TRIGGER ON {_ident(store.schema)}.{_ident(first['table'])} from the role that made it, "
                "unless you know what it does"
            )
    return section


def trigger_text(item: Trigger) -> str:
    """One trigger or rule as doctor names it."""
    from cafleet.store import role_text

    text = f"{item['kind']} {item['name']} on {item['table']}"
    if item["kind"] == "trigger":
        text += f" runs {item['function']} of role {role_text(item['function_owner'])}"
        if item["security_definer"]:
            text += " (SECURITY DEFINER)"
    return text


def _ident(name: str) -> str:
    """An SQL identifier as it has to be typed: bare when lower-case and plain, else quoted."""
    plain = name and (name[0] == "_" or "a" <= name[0] <= "z")
    if plain and all(c == "_" or "a" <= c <= "z" or "0" <= c <= "9" for c in name):
        return name
    return '"' + name.replace('"', '""') + '"'


# What `cafleet doctor` says about a trigger or rule on a required table that is not foreign.
TRIGGER_NOTE = "cafleet creates no trigger or rule on its tables; make sure it belongs there"


# What `cafleet doctor` says about a missing or altered auxiliary index or table.
ADVICE = {
    ("index", "missing"): (
        "commands work but read a member's whole history; the next `fleet create` adds it, "
        "or run `cafleet setup` to add it now"
    ),
    ("index", "altered"): (
        "an index with cafleet's auxiliary name has another definition; drop it and run `cafleet setup`"
    ),
    ("table", "missing"): (
        "not created yet, commands work without it; the first command that needs it creates it "
        "(docs/storage.md says which), or run `cafleet setup` to add it now"
    ),
    ("table", "altered"): (
        "a table with cafleet's auxiliary name has other columns, so usage and budgets may fail; "
        "rename it and run `cafleet setup`"
    ),
}


def _database_fix(error: CafleetError) -> str:
    """Advice that fits the failure: a full disk or a read-only folder is not a reason to
    move a healthy file away; only a file that is not (or no longer) cafleet's is."""
    from cafleet.store.diagnosis import Refused

    fix = getattr(error, "fix", None)
    if fix:
        return fix
    if "newer than this cafleet" in str(error):
        return "upgrade cafleet; the file was left unchanged"
    if "hot journal" in str(error):
        return "let the program that was writing it recover it; the files were left unchanged, do not move them"
    if isinstance(error, Refused):
        return "point CAFLEET_DATABASE_URL at a cafleet database, or move this file away"
    return "the file was not changed; fix the cause above and run `cafleet doctor` again (do not move the file away)"


def coding_agents_section(environ) -> dict:
    from cafleet.agents.backends import AGENTS, binary_version, find_binary

    agents = {}
    for agent in AGENTS:
        try:
            path = find_binary(agent, environ)
        except CafleetError as error:
            agents[agent] = {"found": False, "error": str(error)}
            continue
        agents[agent] = {"found": True, "path": path, "version": binary_version(agent, environ)}
    ok = any(entry["found"] for entry in agents.values())
    section = {"ok": ok, "agents": agents}
    if not ok:
        section["fix"] = "install Claude Code, Codex CLI or opencode so that its command is on PATH"
    return section


def assets_section(environ, agents_found: list[str]) -> dict:
    from cafleet import __version__
    from cafleet.agents.install import asset_targets, installed_version

    targets = []
    try:
        for agent in agents_found:
            for target in asset_targets(agent, environ):
                version = installed_version(target.path)
                targets.append(
                    {
                        "coding_agent": agent,
                        "path": str(target.path),
                        "installed_version": version,
                        "current": version == __version__,
                    }
                )
    except CafleetError as error:
        return {"ok": False, "error": str(error), "targets": targets, "fix": "fix the variable named above"}
    ok = all(t["current"] for t in targets)
    section = {"ok": ok, "cafleet_version": __version__, "targets": targets}
    if not ok:
        section["fix"] = "run `cafleet setup` to install the current skill and presets"
    return section


def permissions_section(environ) -> dict:
    """Rules in the coding agents' settings that would stop members' ``cafleet message``
    commands (:mod:`cafleet.agents.permissions`), for members started here."""
    from cafleet.agents.permissions import findings

    try:
        cwd = os.getcwd()
    except OSError as error:
        return {"ok": False, "findings": [], "error": f"the working directory cannot be read ({error})"}
    found = [f.as_dict() for f in findings(environ, cwd)]
    section: dict = {"ok": not found, "directory": cwd, "findings": found}
    if found:
        section["fix"] = (
            "remove or narrow the rules above (or fix the files), or members started here cannot "
            "read or send their messages"
        )
    return section


# $1 is the memory file (/proc/meminfo, or CAFLEET_MEMINFO), the rest the programs to find.
_HOST_PROBE = (
    'm=$1; shift; for p; do printf "%s\\t%s\\n" "$p" "$(command -v "$p" 2>/dev/null)"; done; '
    'printf "tmux -V\\t%s\\n" "$(tmux -V 2>/dev/null)"; '
    'printf "MemAvailable\\t%s\\n" "$(grep -m 1 "^MemAvailable:" "$m" 2>/dev/null)"'
)


def placement_hosts(ctx: Context) -> dict[str, set[str]]:
    """Hosts of live placements (members of live fleets) -> the coding agents placed there."""
    from cafleet.broker import fleets
    from cafleet.mux.ssh import split_session

    hosts: dict[str, set[str]] = {}
    try:
        store = ctx.store()
        for fleet in fleets.list_fleets(store):
            for placement in fleets.fleet_placements(store, fleet["fleet_id"]):
                try:
                    host = split_session(placement["session"])[0]
                except CafleetError:
                    continue
                if host:
                    hosts.setdefault(host, set()).add(placement["coding_agent"])
    except CafleetError:  # the database section reports it
        return hosts
    return hosts


def check_host(host: str, agents, environ, meminfo: str = "") -> dict:
    """One SSH call: is ``host`` reachable, does it have tmux and the agents' programs, and
    its available memory in MiB (``memory_mib``, None when the file ``meminfo`` gives none)."""
    from cafleet.agents.backends import AGENTS, backend
    from cafleet.delivery.spawning.capacity import meminfo_available
    from cafleet.mux.ssh import Ssh, check_host as checked

    names = sorted(agents) if agents else list(AGENTS)
    binaries = {name: backend(name).binary if name != "standin" else __import__("sys").executable for name in names}
    try:
        checked(host)
    except CafleetError as error:  # not a host string: its error says what to give, no ssh command would run
        return {"ok": False, "host": host, "reachable": False, "error": str(error)}
    try:
        code, out, _err = Ssh(host, environ).run(
            ["sh", "-c", _HOST_PROBE, "sh", meminfo, "tmux", "cafleet", *binaries.values()]
        )
    except CafleetError as error:
        return {
            "ok": False,
            "host": host,
            "reachable": False,
            "error": str(error),
            "fix": f"check `{ssh_check_command(host, environ)}` works without a prompt (keys, known_hosts)",
        }
    found = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    agent_paths = {name: found.get(binary) or None for name, binary in binaries.items()}
    tmux_ok, cafleet = bool(found.get("tmux")), found.get("cafleet") or None
    agents_ok = all(agent_paths.values()) if agents else any(agent_paths.values())
    section = {
        "ok": code == 0 and tmux_ok and bool(cafleet) and agents_ok,
        "host": host,
        "reachable": True,
        "tmux": (found.get("tmux -V") or found["tmux"]) if tmux_ok else None,
        "cafleet": cafleet,
        "coding_agents": agent_paths,
        "memory_mib": meminfo_available(found.get("MemAvailable", "")),
    }
    if not section["ok"]:
        missing = program = "tmux" if not tmux_ok else "cafleet" if not cafleet else "the coding agent"
        if tmux_ok and cafleet:  # the command of the first agent not found there
            program = next((binaries[name] for name, path in agent_paths.items() if not path), "tmux")
        probe = ssh_check_command(host, environ, "command", "-v", program)
        section["fix"] = f"install {missing} on {host} so that `{probe}` finds it on PATH"
    return section


def ssh_check_command(host: str, environ, *remote: str) -> str:
    """The ``ssh ...`` a person runs to check a checked ``[user@]host[:port]`` as cafleet
    reaches it (``remote``: the command there, ``true`` by default): its ssh_config (``-F``,
    from ``CAFLEET_SSH_CONFIG``), the port as ``-p`` (OpenSSH reads ``host:2222`` as a host
    name) and an IPv6 address without its brackets."""
    import shlex

    from cafleet.mux.ssh import destination

    address, port = destination(host)
    config = environ.get("CAFLEET_SSH_CONFIG", "")
    words = ["ssh", *(["-F", config] if config else []), "-o", "BatchMode=yes", *(["-p", port] if port else [])]
    return shlex.join([*words, address, *(remote or ["true"])])


def hosts_section(ctx: Context, hosts) -> dict | None:
    wanted = placement_hosts(ctx)
    for host in hosts:
        wanted.setdefault(host, set())
    if not wanted:
        return None
    meminfo = _meminfo_path(ctx.environ) or ""
    checked = [check_host(host, agents, ctx.environ, meminfo) for host, agents in sorted(wanted.items())]
    section = {"ok": all(entry["ok"] for entry in checked), "hosts": checked}
    fixes = [entry["fix"] for entry in checked if not entry["ok"] and entry.get("fix")]
    if fixes:  # a refused host string has none: its error is the fix
        section["fix"] = fixes[0]
    return section


def _meminfo_path(environ) -> str | None:
    """The memory file the check reads (/proc/meminfo, or CAFLEET_MEMINFO); None when that
    setting is unusable (the memory section says why)."""
    from cafleet.delivery.spawning.capacity import meminfo_path

    try:
        return meminfo_path(environ)
    except CafleetError:
        return None


def memory_section(ctx: Context, remote: dict | None) -> dict:
    """Each host's headroom (docs/decisions.md, "Room for a member"): its available memory
    and how many more members of each agent fit, the margin kept free; this machine first,
    then every host the hosts section reached (its probe read the memory too: no SSH call of
    its own). Warnings, never a failure: a host short of memory is busy, not broken, and
    ``member create`` refuses there with the figures."""
    from cafleet.agents.backends import AGENTS
    from cafleet.delivery.spawning import capacity

    settings = ctx.settings
    section: dict = {
        "ok": True,
        "margin_mib": settings.memory_margin,
        "estimates_mib": {agent: capacity.estimate(settings, agent)[0] for agent in AGENTS},
        "fleet_max_members": settings.fleet_max_members,
        "hosts": [],
    }

    def entry(host: str | None, available: int | None, **more) -> dict:
        room = None if available is None else {agent: capacity.room(settings, available, agent) for agent in AGENTS}
        return {"host": host, "available_mib": available, "room": room, **more}

    try:
        section["hosts"].append(entry(None, capacity.available_here(ctx.environ)))
    except CafleetError as error:
        section["hosts"].append(entry(None, None, error=str(error)))
    meminfo = _meminfo_path(ctx.environ)
    for host in (remote or {}).get("hosts", []):
        if not host["reachable"]:
            continue  # the hosts section says why
        available = host["memory_mib"]
        if available is None and meminfo != capacity.MEMINFO:  # the test's file, or an unusable setting
            why = f"the file CAFLEET_MEMINFO names, {shown(meminfo)}," if meminfo else "CAFLEET_MEMINFO"
            section["hosts"].append(entry(host["host"], None, error=f"{why} gives no MemAvailable there"))
        else:
            section["hosts"].append(entry(host["host"], available))
    return section


def keepers_section(ctx: Context) -> dict | None:
    """The keeper of each live fleet (docs/delivery.md): running (pid, since), stalled (no
    heartbeat for ``CAFLEET_KEEPER_STALLED_AFTER`` s) or not running. Stalled is always a
    failure: it holds the lock, so no other keeper starts. Not running is a failure only
    while the keeper is on and the fleet has previews owed: then nothing delivers them until
    a command runs."""
    from cafleet.broker import fleets, notifications, notify
    from cafleet.cli.fleet import keeper_text
    from cafleet.delivery.supervision import keeper_control

    try:
        store = ctx.store()
        live = fleets.list_fleets(store)
    except CafleetError:  # the database section reports it
        return None
    if not live:
        return None
    enabled = bool(ctx.settings.keeper)
    entries = []
    for fleet in live:
        found = keeper_control.status(store, ctx.settings, fleet["fleet_id"])
        owed = len(notifications.recipients_owed_notifications(store, fleet["fleet_id"]))
        entry = dict(found.as_dict(), fleet_id=fleet["fleet_id"], members_owed=owed)
        entry["ok"] = found.running or (found.state == keeper_control.NOT_RUNNING and (not enabled or not owed))
        entry["text"] = keeper_text(found, ctx.settings)
        posts = notify.status(store, fleet["fleet_id"])
        if posts["failing"]:  # a warning: the fleet works, a person away is not told
            entry["notify"] = posts
        entries.append((entry, found))
    section = {"ok": all(e["ok"] for e, _ in entries), "enabled": enabled, "fleets": [e for e, _ in entries]}
    if not section["ok"]:
        failing, found = next((e, found) for e, found in entries if not e["ok"])
        fleet_id = failing["fleet_id"]
        if found.state == keeper_control.STALLED:
            section["fix"] = f"fleet {fleet_id}'s keeper is stalled (stopped or hung): {found.remedy()}"
        else:
            section["fix"] = (
                f"fleet {fleet_id} has previews owed and no keeper: any `cafleet message send` or `message wait` "
                f"in it starts one, or run `cafleet fleet keep {fleet_id}`"
            )
    return section


def worktrees_section(ctx: Context) -> dict | None:
    """Members' worktrees that need a hand (docs/worktrees.md): kept for deleted members,
    unknown to git, or in cafleet's folder without a record; each with the command that
    cleans it up. Warnings, never a failure: nothing is broken, and each one holds work
    cafleet would not throw away on its own."""
    import os

    from cafleet.delivery import worktrees

    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None
    try:
        findings = worktrees.survey(ctx.store(), ctx.environ, cwd)
    except CafleetError:  # the database section reports it
        return None
    if not findings:
        return None
    return {"ok": True, "findings": findings}


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def _text(mux, db, agents, assets, permissions, remote, memory, keeping, trees) -> str:
    """The report as lines, one renderer per section. Every value is shown through
    ``inline``: paths and versions a host printed, ssh's errors, the names of files here
    can all hold escape sequences or bidi controls."""
    show = inline
    lines = [
        f"{_mark(mux['ok'])} multiplexer: "
        + (f"{show(mux['backend'])}, calling pane {show(mux['pane_id'])}" if mux["ok"] else show(mux["error"]))
    ]
    lines += _database_lines(db)
    lines += _agents_lines(agents)
    lines += _assets_lines(assets)
    lines += _permissions_lines(permissions)
    lines += _hosts_lines(remote)
    lines += _memory_lines(memory)
    lines += _keepers_lines(keeping)
    if trees is not None:
        lines.append("! worktrees:")
        for finding in trees["findings"]:
            lines.append(f"    ! {show(finding['detail'])}; clean up: {show(finding['command'])}")
    for section in (
        mux,
        db,
        agents,
        assets,
        permissions,
        *([remote] if remote else []),
        *([keeping] if keeping else []),
    ):
        if not section["ok"] and section.get("fix"):
            lines.append(f"fix: {show(section['fix'])}")
    return "\n".join(lines)


def _database_lines(db: dict) -> list[str]:
    show = inline
    lines = [
        f"{_mark(db['ok'])} database: " + (f"{show(db['path'])} ({db['diagnosis']})" if db["ok"] else show(db["error"]))
    ]
    for item in db.get("triggers", []):
        lines.append(
            f"    {'✗' if item['foreign'] else '!'} {trigger_text(item)}"
            + ("" if item["foreign"] else f": {TRIGGER_NOTE}")
        )
    for name, problem in db.get("auxiliary_indexes", {}).items():
        lines.append(f"    ! index {show(name)} is {problem}: {ADVICE['index', problem]}")
    for name, problem in db.get("auxiliary_tables", {}).items():
        lines.append(f"    ! table {show(name)} is {problem}: {ADVICE['table', problem]}")
    return lines


def _agents_lines(agents: dict) -> list[str]:
    show = inline
    lines = [f"{_mark(agents['ok'])} coding agents:"]
    for name, entry in agents["agents"].items():
        detail = (
            f"{show(entry['path'])} ({show(entry['version'] or 'version unknown')})"
            if entry["found"]
            else "not found on PATH"
        )
        lines.append(f"    {_mark(entry['found'])} {name}: {detail}")
    return lines


def _assets_lines(assets: dict) -> list[str]:
    if "error" in assets:
        return [f"✗ assets: {inline(assets['error'])}"]
    if not assets["targets"]:
        return [f"{_mark(assets['ok'])} assets: no coding agent found, nothing to check"]
    head = f"{_mark(assets['ok'])} assets (cafleet {assets['cafleet_version']}):"
    return [head, *map(_asset_line, assets["targets"])]


def _asset_line(target: dict) -> str:
    state = "current" if target["current"] else f"installed {inline(target['installed_version'] or 'nothing')}"
    return f"    {_mark(target['current'])} {target['coding_agent']}: {inline(target['path'])} ({state})"


def _permissions_lines(permissions: dict) -> list[str]:
    show = inline
    if "error" in permissions:
        return [f"✗ member permissions: {show(permissions['error'])}"]
    if not permissions["findings"]:
        return ["✓ member permissions: no rule stops `cafleet message` for members started here"]
    lines = [f"✗ member permissions (members started in {show(permissions['directory'])}):"]
    for item in permissions["findings"]:
        rule = f" {show(item['rule'])}" if item["rule"] else ""
        stops = f" ({', '.join(item['commands'])})" if item["commands"] else ""
        lines.append(f"    ✗ {item['coding_agent']}: {show(item['path'])}:{rule} {show(item['problem'])}{stops}")
    return lines


def _hosts_lines(remote: dict | None) -> list[str]:
    show = inline
    lines = []
    for entry in (remote or {}).get("hosts", []):
        host = show(entry["host"])
        if not entry["reachable"]:
            lines.append(f"✗ host {host}: {show(entry['error'])}")
            continue
        if entry["tmux"]:
            lines.append(f"{_mark(entry['ok'])} host {host}: reachable over SSH, {show(entry['tmux'])}")
        else:
            lines.append(f"✗ host {host}: reachable over SSH, but tmux is not on its PATH")
        lines.append(
            f"    {_mark(bool(entry['cafleet']))} cafleet: {show(entry['cafleet'] or 'not found on its PATH')}"
        )
        for name, path in entry["coding_agents"].items():
            lines.append(f"    {_mark(bool(path))} {show(name)}: {show(path or 'not found on its PATH')}")
    return lines


def _memory_lines(memory: dict) -> list[str]:
    """One line a host: its available memory and the members of each agent that still fit."""
    cap = memory["fleet_max_members"]
    capped = f"; at most {cap} members a fleet (CAFLEET_FLEET_MAX_MEMBERS)" if cap is not None else ""
    lines = []
    for entry in memory["hosts"]:
        where = "this machine" if entry["host"] is None else f"host {inline(entry['host'])}"
        if entry.get("error"):
            lines.append(f"    ! {where}: {inline(entry['error'])}")
            continue
        if entry["room"] is None:
            lines.append(
                f"    ! {where}: available memory unknown (no MemAvailable in /proc/meminfo); "
                "`member create` does not check it there"
            )
            continue
        room = ", ".join(f"{n} {agent}" for agent, n in entry["room"].items())
        full = not all(entry["room"].values())
        lines.append(
            f"    {'!' if full else '✓'} {where}: {entry['available_mib']} MiB available, room for {room} members"
        )
    mark = "!" if any(line.startswith("    !") for line in lines) else "✓"
    estimates = ", ".join(f"{agent} {mib}" for agent, mib in memory["estimates_mib"].items())
    head = f"{mark} memory (MiB a member: {estimates}; {memory['margin_mib']} MiB kept free{capped}):"
    return [head, *lines]


def _keepers_lines(keeping: dict | None) -> list[str]:
    if keeping is None:
        return []
    state = "on" if keeping["enabled"] else "off (CAFLEET_KEEPER=off)"
    lines = [f"{_mark(keeping['ok'])} keepers ({state}):"]
    for entry in keeping["fleets"]:
        owed = f"; {entry['members_owed']} member(s) owed a preview" if entry["members_owed"] else ""
        lines.append(f"    {_mark(entry['ok'])} fleet {entry['fleet_id']}: keeper {entry['text']}{owed}")
        if "notify" in entry:
            from cafleet.cli.fleet import notify_failing

            lines.append(f"    ! fleet {entry['fleet_id']}: {notify_failing(entry['notify'])}")
    return lines


def doctor(ctx: Context, hosts):
    mux = multiplexer_section(ctx.environ)
    db = database_section(ctx)
    agents = coding_agents_section(ctx.environ)
    found = [name for name, entry in agents["agents"].items() if entry["found"]]
    assets = assets_section(ctx.environ, found)
    permissions = permissions_section(ctx.environ)
    report = {
        "multiplexer": mux,
        "database": db,
        "coding_agents": agents,
        "assets": assets,
        "member_permissions": permissions,
    }
    remote = hosts_section(ctx, hosts) if db["ok"] or hosts else None
    if remote is not None:
        report["hosts"] = remote
    memory = report["memory"] = memory_section(ctx, remote)
    keeping = keepers_section(ctx) if db["ok"] else None
    if keeping is not None:
        report["keepers"] = keeping
    trees = worktrees_section(ctx) if db["ok"] else None
    if trees is not None:
        report["worktrees"] = trees

    def text():
        return _text(mux, db, agents, assets, permissions, remote, memory, keeping, trees)

    if ctx.json:  # every line without the database password, whatever quoted it
        from cafleet.render import to_json

        ctx.out(ctx.hide_secrets(to_json(report)))
    else:
        ctx.out(ctx.hide_secrets(text()))
    return ExitCode.OK if all(section["ok"] for section in report.values()) else ExitCode.FAILURE
