"""Every command, its parameters, their defaults and help, as data. Importing this module
is cheap: the handlers are named by "module:function" and imported only when their command
runs. The parser passes every parameter to its handler, filled with the default declared
here when it was not given, so a handler's signature is exactly its command's parameters
and no handler restates a default (tests/test_parser.py checks both). The help, the shell
completion scripts and the README's command reference are generated from this table.
"""

from __future__ import annotations

# The default of a numeric option is its declaration in
# ``cafleet.config.declarations.OPTIONS`` (which also bounds it); the parser looks it up
# only when the option was not given.
FROM_SETTINGS = "from cafleet.config.declarations.OPTIONS"


class Param:
    """A positional argument (``flag`` is None) or an option (``--flag``).

    kind: "id" (positive integer, :func:`cafleet.validation.parse_id`), "count" (integer),
    "seconds" and "number" (a finite number) bounded by the option's declaration in
    ``cafleet.config.declarations.OPTIONS`` (checked by the parser, before the handler runs),
    "text", "flag" (boolean switch), "multi" (repeatable text).
    ``default`` is the value the handler gets when the parameter is not given (a flag:
    False, a multi: []); ``default_text`` says in the help what a ``None`` default means.
    """

    __slots__ = ("choices", "default", "default_text", "dest", "flag", "help", "kind", "metavar", "required")

    def __init__(
        self,
        dest,
        flag=None,
        kind="text",
        *,
        required=False,
        metavar=None,
        help="",
        choices=None,
        default=None,
        default_text=None,
    ):
        self.dest = dest
        self.flag = flag
        self.kind = kind
        self.required = required
        self.metavar = metavar or dest.upper()
        self.help = help
        self.choices = choices
        self.default = default
        self.default_text = default_text


class Command:
    __slots__ = ("body", "group", "handler", "name", "params", "summary")

    def __init__(self, group, name, handler, summary, params=(), body=False):
        self.group = group
        self.name = name
        self.handler = handler
        self.summary = summary
        self.params = params
        self.body = body  # takes a message body: positional TEXT or --file PATH


def _body_params(text_help: str) -> tuple:
    return (
        Param("text", None, "text", metavar="TEXT", help=text_help),
        Param("file", "--file", "text", metavar="PATH", help="read the body from a file (- for stdin), as UTF-8 bytes"),
    )


def _id(dest: str, what: str) -> Param:
    return Param(dest, None, "id", required=True, metavar=dest.upper(), help=what)


def _name(what: str) -> Param:
    return Param("name", "--name", required=True, metavar="NAME", help=what)


def _idle_after(what: str) -> Param:
    return Param("idle_after", "--idle-after", "seconds", metavar="S", default=FROM_SETTINGS, help=what)


AGENT_HELP = "coding agent: claude, codex or opencode"
SHELLS = ("bash", "zsh", "fish")

GROUPS = {
    "fleet": "create, list, show and delete fleets",
    "member": "spawn, list, inspect and delete members",
    "message": "send, receive and acknowledge messages",
    "setup": "initialise the database and install agent skills and presets",
    "doctor": "diagnose multiplexer, database, coding agents and assets",
    "server": "serve the admin WebUI",
    "demo": "run a self-contained demo fleet in a private tmux server",
    "completion": "print a shell completion script (bash, zsh or fish)",
}

COMMANDS = [
    Command(
        "fleet",
        "create",
        "cafleet.cli.fleet:create",
        "Create a fleet with the calling pane as its root Director.",
        (
            _name("fleet name"),
            Param(
                "coding_agent",
                "--coding-agent",
                required=True,
                metavar="AGENT",
                help=AGENT_HELP + ", the Director's own",
            ),
            Param(
                "worktrees",
                "--worktrees",
                "flag",
                help="give every member its own git worktree unless `member create --no-worktree` (docs/worktrees.md)",
            ),
            Param(
                "revive",
                "--revive",
                "flag",
                help="the keeper starts a member whose agent died again, its conversation resumed, and tells you; "
                "at most 3 times a member an hour (`fleet auto-revive`; docs/delivery.md)",
            ),
            Param(
                "placement",
                "--placement",
                metavar="WHERE",
                choices=("auto", "split", "window"),
                help="where members' panes open unless `member create --placement` says (docs/delivery.md)",
                default_text="auto",
            ),
            Param(
                "notify",
                "--notify",
                "multi",
                metavar="URL",
                help="post each notice of your inbox to this http(s) URL (repeatable; json+, slack+ or ntfy+ before it "
                "chooses the format; docs/delivery.md)",
                default_text="CAFLEET_NOTIFY_URL of the keeper",
            ),
        ),
    ),
    Command(
        "fleet", "list", "cafleet.cli.fleet:list_", "List live fleets with their Director and active-member count."
    ),
    Command(
        "fleet",
        "show",
        "cafleet.cli.fleet:show",
        "Show one fleet (deleted ones included).",
        (_id("fleet_id", "the fleet"),),
    ),
    Command(
        "fleet",
        "delete",
        "cafleet.cli.fleet:delete",
        "Soft-delete a fleet: deregister its members, close their panes, keep messages (idempotent); "
        "remove members' worktrees that hold nothing unsaved.",
        (
            _id("fleet_id", "the fleet"),
            Param(
                "discard_worktree",
                "--discard-worktree",
                "flag",
                help="remove members' worktrees and branches even with uncommitted, ignored or unpushed work",
            ),
        ),
    ),
    Command(
        "fleet",
        "restore",
        "cafleet.cli.fleet:restore",
        "From a new pane after the fleet's panes were lost: make it the Director's, start every lost member "
        "again with its conversation resumed, start the keeper (idempotent).",
        (_id("fleet_id", "the fleet"),),
    ),
    Command(
        "fleet",
        "auto-revive",
        "cafleet.cli.fleet:auto_revive",
        "Show, set or turn off the keeper's reviving of members whose agent died (docs/delivery.md).",
        (
            _id("fleet_id", "the fleet"),
            Param(
                "per_hour",
                "--per-hour",
                "count",
                metavar="N",
                help="turn it on: revivals of one member an hour at most before the keeper gives up on it",
                default_text="unchanged",
            ),
            Param("off", "--off", "flag", help="turn it off (`member revive` still works)"),
        ),
    ),
    Command(
        "fleet",
        "usage",
        "cafleet.cli.usage:fleet",
        "Tokens by kind and model and dollars, per member and for the fleet, from the agents' own records.",
        (_id("fleet_id", "the fleet"),),
    ),
    Command(
        "fleet",
        "budget",
        "cafleet.cli.usage:budget",
        "Set, show or clear a fleet's budget: over it, its members get no new work (docs/usage.md).",
        (
            _id("fleet_id", "the fleet"),
            Param("usd", "--usd", "number", metavar="USD", help="the budget in dollars", default_text="unchanged"),
            Param("tokens", "--tokens", "count", metavar="N", help="the budget in tokens", default_text="unchanged"),
            Param("clear", "--clear", "flag", help="remove the fleet's budget"),
        ),
    ),
    Command(
        "fleet",
        "watch",
        "cafleet.cli.watch:watch",
        "Stream what needs the Director's attention: messages, idle, silent, blocked and dead members, stuck previews.",
        (
            _id("fleet_id", "the fleet to watch"),
            Param(
                "interval",
                "--interval",
                "seconds",
                metavar="S",
                default=FROM_SETTINGS,
                help="seconds between member checks",
            ),
            _idle_after(
                "report a member idle (silent: no message activity since it was registered) after S quiet seconds"
            ),
        ),
    ),
    Command(
        "fleet",
        "keep",
        "cafleet.cli.fleet:keep",
        "Run the fleet's keeper in the foreground: deliver owed previews as soon as panes can take them "
        "(`fleet create` starts it for you; docs/delivery.md).",
        (_id("fleet_id", "the fleet to keep"),),
    ),
    Command(
        "member",
        "create",
        "cafleet.cli.member:create",
        "Spawn a member agent into a new pane (Director only).",
        (
            Param("fleet_id", "--fleet-id", "id", required=True, metavar="FLEET_ID", help="the fleet to spawn into"),
            _name("the member's name"),
            Param(
                "description",
                "--description",
                required=True,
                metavar="DESCRIPTION",
                help="what the member does, shown in the roster",
            ),
            Param("coding_agent", "--coding-agent", metavar="AGENT", help=AGENT_HELP, default_text="the Director's"),
            Param("model", "--model", metavar="MODEL", help="the agent's model", default_text="the agent's own"),
            Param(
                "effort",
                "--effort",
                metavar="LEVEL",
                help="the agent's reasoning effort",
                default_text="the agent's own",
            ),
            Param(
                "host",
                "--host",
                metavar="HOST",
                help="spawn on [user@]host[:port] over SSH, in a tmux session of its own there",
                default_text="this machine, beside the Director",
            ),
            Param(
                "budget_usd",
                "--budget-usd",
                "number",
                metavar="USD",
                help="refuse new work for the member once it has spent this many dollars (docs/usage.md)",
                default_text="no budget",
            ),
            Param(
                "budget_tokens",
                "--budget-tokens",
                "count",
                metavar="N",
                help="refuse new work for the member once it has spent this many tokens",
                default_text="no budget",
            ),
            Param(
                "force",
                "--force",
                "flag",
                help="create the member even in a fleet over its budget or at its member cap, or on a host "
                "short of memory for it",
            ),
            Param(
                "worktree",
                "--worktree",
                "flag",
                help="start the member in a new git worktree of the current repository, on a new branch "
                "(docs/worktrees.md)",
            ),
            Param("no_worktree", "--no-worktree", "flag", help="no worktree, in a fleet created with --worktrees"),
            Param(
                "branch",
                "--branch",
                metavar="NAME",
                help="with --worktree: the new branch's name",
                default_text="one named after the fleet and member",
            ),
            Param(
                "base",
                "--base",
                metavar="REF",
                help="with --worktree: where the branch starts",
                default_text="the current HEAD",
            ),
            Param(
                "repo",
                "--repo",
                metavar="PATH",
                help="with --worktree --host: the repository's path on that host",
                default_text="the current directory's path",
            ),
            Param(
                "placement",
                "--placement",
                metavar="WHERE",
                choices=("auto", "split", "window"),
                help="where its pane opens on this machine: split beside the Director, window (the fleet's own "
                "tiled windows), or auto: a split while every pane keeps 80x20, else a window (docs/delivery.md)",
                default_text="the fleet's (fleet create --placement), else auto",
            ),
            *_body_params("the spawn prompt; {fleet_id} {member_id} {director_member_id} {coding_agent} are filled in"),
        ),
        body=True,
    ),
    Command(
        "member",
        "list",
        "cafleet.cli.member:list_",
        "List the active members of a fleet: kind, backend, agent, pane, idle seconds.",
        (
            _id("fleet_id", "the fleet"),
            Param(
                "state",
                "--state",
                "flag",
                help="inspect each pane: alive, idle, silent, blocked, dead, exec (one multiplexer call each)",
            ),
            _idle_after("with --state: idle (or silent) after S quiet seconds"),
        ),
    ),
    Command(
        "member",
        "show",
        "cafleet.cli.member:show",
        "Show one member in detail.",
        (
            _id("member_id", "the member"),
            Param(
                "with_dialog",
                "--with-dialog",
                "flag",
                help="also read its screen: the dialog awaiting its user, if any, with its options numbered as "
                "`member answer` takes them",
            ),
        ),
    ),
    Command(
        "member",
        "usage",
        "cafleet.cli.usage:member",
        "Tokens by kind and model and dollars one member has spent, from its agent's own records.",
        (_id("member_id", "the member"),),
    ),
    Command(
        "member",
        "delete",
        "cafleet.cli.member:delete",
        "Close a member's pane and deregister it (never the root Director); remove its worktree if it holds "
        "nothing unsaved.",
        (
            _id("member_id", "the member"),
            Param(
                "discard_worktree",
                "--discard-worktree",
                "flag",
                help="remove the member's worktree and branch even with uncommitted, ignored or unpushed work",
            ),
        ),
    ),
    Command(
        "member",
        "revive",
        "cafleet.cli.member:revive",
        "Start a member whose pane or agent is gone again, in a new pane, its conversation resumed.",
        (_id("member_id", "the member"),),
    ),
    Command(
        "member",
        "diff",
        "cafleet.cli.member:diff",
        "Print a worktree member's changes against its base, as `git diff` does (new files included).",
        (
            _id("member_id", "the member"),
            Param("stat", "--stat", "flag", help="a summary of changed files, as `git diff --stat`"),
        ),
    ),
    Command(
        "member",
        "capture",
        "cafleet.cli.member:capture",
        "Print the tail of a member's pane.",
        (
            _id("member_id", "the member"),
            Param("lines", "--lines", "count", metavar="N", default=FROM_SETTINGS, help="lines to show"),
            Param("ansi", "--ansi", "flag", help="keep colours and other escape sequences"),
        ),
    ),
    Command(
        "member",
        "prompt",
        "cafleet.cli.member:prompt",
        "Type one line into a member's pane and submit it (the fleet's Director only, from its pane or a person's shell; docs/security.md).",
        (
            _id("member_id", "the member"),
            Param("force", "--force", "flag", help="type it even to a member over its budget or its fleet's"),
            Param("text", None, "text", required=True, metavar="TEXT", help="the line to type"),
        ),
    ),
    Command(
        "member",
        "answer",
        "cafleet.cli.member:answer",
        "Pick one option of the dialog on a member's screen (a permission prompt or a question; buttons drawn "
        "without numbers are numbered 1..N left to right), "
        "only while it is still the dialog a notice described; refused, with nothing sent, when it changed "
        "(the fleet's Director only, from its pane or a person's shell; docs/security.md).",
        (
            _id("member_id", "the member"),
            Param(
                "choice",
                None,
                "id",
                required=True,
                metavar="CHOICE",
                help="the option's number, as the notice gives it (a button's place, counted from the left)",
            ),
            Param(
                "dialog",
                "--dialog",
                "text",
                required=True,
                metavar="DIGEST",
                help="the dialog's digest, as the notice (or `fleet watch`, or the WebUI) gives it",
            ),
            Param(
                "label",
                "--label",
                "text",
                metavar="LABEL",
                help="refused, with nothing sent, unless option CHOICE reads LABEL, as the notice shows it",
            ),
        ),
    ),
    Command(
        "member",
        "exec",
        "cafleet.cli.member:exec_",
        "Run a command in a member's pane, for a member whose harness refuses it: its output lands in the "
        "member's own context; the exit status is recorded and the Director gets a notice when it ends "
        "(the fleet's Director only, from its pane or a person's shell; docs/security.md).",
        (
            _id("member_id", "the member (never the Director)"),
            Param("command", None, "text", metavar="COMMAND", help="the shell command (run with /bin/sh -c)"),
            Param(
                "file", "--file", "text", metavar="PATH", help="read the command (a script) from a file (- for stdin)"
            ),
            Param("wait", "--wait", "flag", help="block until it ended and print its exit status"),
        ),
    ),
    Command(
        "member",
        "exec-run",
        "cafleet.cli.member:exec_run",
        "Internal: run exec ID here, once (what `member exec` types into the member's pane).",
        (_id("exec_id", "the exec"),),
    ),
    Command(
        "message",
        "send",
        "cafleet.cli.message:send",
        "Send one message and wake the recipient.",
        (
            Param("from_id", "--from-member-id", "id", required=True, metavar="ID", help="the sender"),
            Param("to_id", "--to-member-id", "id", required=True, metavar="ID", help="the recipient"),
            Param("force", "--force", "flag", help="send even to a member over its budget or its fleet's"),
            *_body_params("the message body"),
        ),
        body=True,
    ),
    Command(
        "message",
        "broadcast",
        "cafleet.cli.message:broadcast",
        "Send one message to every other active member, one message each (Director only).",
        (
            Param("from_id", "--from-member-id", "id", required=True, metavar="ID", help="the Director"),
            *_body_params("the message body"),
        ),
        body=True,
    ),
    Command(
        "message",
        "poll",
        "cafleet.cli.message:poll",
        "List unacknowledged incoming messages, newest first.",
        (_id("member_id", "the recipient"),),
    ),
    Command(
        "message",
        "wait",
        "cafleet.cli.message:wait",
        "Block until the member has unacknowledged messages (exit 3 on timeout).",
        (
            _id("member_id", "the recipient"),
            Param(
                "timeout", "--timeout", "seconds", metavar="S", default=FROM_SETTINGS, help="give up after S seconds"
            ),
        ),
    ),
    Command(
        "message",
        "listen",
        "cafleet.cli.message:listen",
        "Stream pending incoming messages, one line each, without changing them.",
        (_id("member_id", "the recipient"),),
    ),
    Command(
        "message", "show", "cafleet.cli.message:show", "Show one message by id.", (_id("message_id", "the message"),)
    ),
    Command(
        "message",
        "ack",
        "cafleet.cli.message:ack",
        "Acknowledge a message (input_required -> completed).",
        (_id("message_id", "the message"),),
    ),
    Command(
        "setup",
        None,
        "cafleet.cli.setup:setup",
        "Initialise the database and install the cafleet skill and presets for coding agents, offline.",
        (Param("coding_agents", "--coding-agent", "multi", metavar="AGENT", help=AGENT_HELP, default_text="all"),),
    ),
    Command(
        "doctor",
        None,
        "cafleet.cli.doctor:doctor",
        "Diagnose multiplexer and calling pane, database file, coding agents, installed assets, the permission rules that would stop members, and each host's room for more members (its available memory).",
        (
            Param(
                "hosts",
                "--host",
                "multi",
                metavar="HOST",
                help="also check this host over SSH: reachable, tmux, coding agents (hosts of live members "
                "are always checked)",
            ),
        ),
    ),
    Command(
        "server",
        None,
        "cafleet.cli.server:server",
        "Serve the admin WebUI (see docs/webui.md).",
        (
            Param(
                "host",
                "--host",
                metavar="HOST",
                help="bind address",
                default_text="CAFLEET_BROKER_HOST, else 127.0.0.1",
            ),
            Param(
                "port", "--port", "count", metavar="PORT", help="port", default_text="CAFLEET_BROKER_PORT, else 8000"
            ),
            Param(
                "allow_remote",
                "--allow-remote",
                "flag",
                help="serve on a non-loopback address over plain http (the login token crosses the network in clear)",
            ),
            Param(
                "public",
                "--public",
                metavar="URL",
                help="the address people open, in front of this server (a TLS proxy): answered, named in the "
                "login link, and https makes the cookie Secure",
                default_text="CAFLEET_PUBLIC_URL",
            ),
        ),
    ),
    Command(
        "demo",
        None,
        "cafleet.cli.demo:demo",
        "Run a demo fleet (Director + two stand-in members) in a private tmux server.",
        (Param("keep", "--keep", "flag", help="leave the demo tmux server running for inspection"),),
    ),
    Command(
        "completion",
        None,
        "cafleet.cli.completion:completion",
        "Print a static completion script for bash, zsh or fish.",
        (Param("shell", None, "text", required=True, metavar="SHELL", choices=SHELLS, help="bash, zsh or fish"),),
    ),
]


def default(param: Param):
    """The value a handler gets for ``param`` when it was not given."""
    if param.kind == "multi":
        return []
    if param.kind == "flag":
        return False
    if param.default == FROM_SETTINGS:
        from cafleet.config import declared

        return declared(param.flag).default
    return param.default
