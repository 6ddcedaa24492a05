"""Every command, its parameters and help, as data. Importing this module is cheap: the
handlers are named by "module:function" and imported only when their command runs."""

from __future__ import annotations


class Param:
    """A positional argument (``flag`` is None) or an option (``--flag``).

    kind: "id" (positive integer), "count" (positive integer), "seconds" (non-negative
    number), "text", "flag" (boolean switch), "multi" (repeatable text).
    """

    __slots__ = ("dest", "flag", "kind", "required", "metavar", "help", "choices")

    def __init__(self, dest, flag=None, kind="text", *, required=False, metavar=None, help="", choices=None):
        self.dest = dest
        self.flag = flag
        self.kind = kind
        self.required = required
        self.metavar = metavar or dest.upper()
        self.help = help
        self.choices = choices


class Command:
    __slots__ = ("group", "name", "handler", "summary", "params", "body")

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


AGENT_HELP = "coding agent: claude, codex or opencode"

GROUPS = {
    "fleet": "create, list, show and delete fleets",
    "member": "spawn, list, inspect and delete members",
    "message": "send, receive and acknowledge messages",
    "setup": "initialise the database and install agent skills and presets",
    "doctor": "diagnose multiplexer, database, coding agents and assets",
    "server": "serve the admin WebUI",
    "demo": "run a self-contained demo fleet in a private tmux server",
}

COMMANDS = [
    Command("fleet", "create", "cafleet.cli.fleet:create",
            "Create a fleet with the calling pane as its root Director.",
            (Param("name", "--name", required=True, metavar="NAME", help="fleet name"),
             Param("coding_agent", "--coding-agent", required=True, metavar="AGENT", help=AGENT_HELP))),
    Command("fleet", "list", "cafleet.cli.fleet:list_", "List live fleets."),
    Command("fleet", "show", "cafleet.cli.fleet:show", "Show one fleet (deleted ones included).",
            (Param("fleet_id", None, "id", required=True, metavar="FLEET_ID"),)),
    Command("fleet", "delete", "cafleet.cli.fleet:delete",
            "Soft-delete a fleet: deregister its members, close their panes, keep messages.",
            (Param("fleet_id", None, "id", required=True, metavar="FLEET_ID"),)),
    Command("fleet", "watch", "cafleet.cli.watch:watch",
            "Stream what needs the Director's attention: messages, idle, blocked and dead members, stuck previews.",
            (Param("fleet_id", None, "id", required=True, metavar="FLEET_ID"),
             Param("interval", "--interval", "seconds", metavar="S", help="seconds between member checks (default 5)"),
             Param("idle_after", "--idle-after", "seconds", metavar="S",
                   help="report a member idle after S quiet seconds (default 600)"))),
    Command("member", "create", "cafleet.cli.member:create",
            "Spawn a member agent into a new pane (Director only).",
            (Param("fleet_id", "--fleet-id", "id", required=True, metavar="FLEET_ID"),
             Param("name", "--name", required=True, metavar="NAME"),
             Param("description", "--description", required=True, metavar="TEXT"),
             Param("coding_agent", "--coding-agent", metavar="AGENT", help=AGENT_HELP + " (default: the Director's)"),
             Param("model", "--model", metavar="MODEL"),
             Param("effort", "--effort", metavar="LEVEL"),
             *_body_params("the spawn prompt; {fleet_id} {member_id} {director_member_id} {coding_agent} are filled in")),
            body=True),
    Command("member", "list", "cafleet.cli.member:list_", "List the active members of a fleet.",
            (Param("fleet_id", None, "id", required=True, metavar="FLEET_ID"),
             Param("state", "--state", "flag", help="inspect each pane: alive, idle, blocked, dead (one multiplexer call each)"),
             Param("idle_after", "--idle-after", "seconds", metavar="S", help="with --state: idle after S quiet seconds (default 600)"))),
    Command("member", "show", "cafleet.cli.member:show", "Show one member in detail.",
            (Param("member_id", None, "id", required=True, metavar="MEMBER_ID"),)),
    Command("member", "delete", "cafleet.cli.member:delete", "Close a member's pane and deregister it.",
            (Param("member_id", None, "id", required=True, metavar="MEMBER_ID"),)),
    Command("member", "capture", "cafleet.cli.member:capture", "Print the tail of a member's pane.",
            (Param("member_id", None, "id", required=True, metavar="MEMBER_ID"),
             Param("lines", "--lines", "count", metavar="N", help="lines to show (default 40)"),
             Param("ansi", "--ansi", "flag", help="keep colours and other escape sequences"))),
    Command("member", "prompt", "cafleet.cli.member:prompt", "Type one line into a member's pane and submit it.",
            (Param("member_id", None, "id", required=True, metavar="MEMBER_ID"),
             Param("text", None, "text", required=True, metavar="TEXT"))),
    Command("message", "send", "cafleet.cli.message:send", "Send one message and wake the recipient.",
            (Param("from_id", "--from-member-id", "id", required=True, metavar="ID"),
             Param("to_id", "--to-member-id", "id", required=True, metavar="ID"),
             *_body_params("the message body")),
            body=True),
    Command("message", "broadcast", "cafleet.cli.message:broadcast",
            "Send one message to every other active member (Director only).",
            (Param("from_id", "--from-member-id", "id", required=True, metavar="ID"),
             *_body_params("the message body")),
            body=True),
    Command("message", "poll", "cafleet.cli.message:poll", "List unacknowledged incoming messages, newest first.",
            (Param("member_id", None, "id", required=True, metavar="MEMBER_ID"),)),
    Command("message", "wait", "cafleet.cli.message:wait",
            "Block until the member has unacknowledged messages (exit 3 on timeout).",
            (Param("member_id", None, "id", required=True, metavar="MEMBER_ID"),
             Param("timeout", "--timeout", "seconds", metavar="S", help="give up after S seconds (default: wait forever)"))),
    Command("message", "listen", "cafleet.cli.message:listen",
            "Stream pending incoming messages, one line each, without changing them.",
            (Param("member_id", None, "id", required=True, metavar="MEMBER_ID"),)),
    Command("message", "show", "cafleet.cli.message:show", "Show one message by id.",
            (Param("message_id", None, "id", required=True, metavar="MESSAGE_ID"),)),
    Command("message", "ack", "cafleet.cli.message:ack", "Acknowledge a message (input_required -> completed).",
            (Param("message_id", None, "id", required=True, metavar="MESSAGE_ID"),)),
    Command("setup", None, "cafleet.cli.setup:setup",
            "Initialise the database and install skills/presets offline.",
            (Param("coding_agents", "--coding-agent", "multi", metavar="AGENT", help=AGENT_HELP + " (repeatable; default all)"),)),
    Command("doctor", None, "cafleet.cli.doctor:doctor",
            "Diagnose multiplexer, database, coding agents and installed assets."),
    Command("server", None, "cafleet.cli.server:server", "Serve the admin WebUI.",
            (Param("host", "--host", metavar="HOST", help="bind address (default 127.0.0.1 or CAFLEET_BROKER_HOST)"),
             Param("port", "--port", "count", metavar="PORT", help="port (default 8000 or CAFLEET_BROKER_PORT)"),
             Param("allow_remote", "--allow-remote", "flag",
                   help="serve on a non-loopback address (the WebUI has no login)"))),
    Command("demo", None, "cafleet.cli.demo:demo",
            "Run a demo fleet (Director + two stand-in members) in a private tmux server.",
            (Param("keep", "--keep", "flag", help="leave the demo tmux server running for inspection"),)),
]
