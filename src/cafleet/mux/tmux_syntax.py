"""tmux's syntax as cafleet writes and reads it: what a stored tmux value may be
(:func:`check_session`, :func:`check_pane`, :func:`check_window`, :func:`check_identity`),
how an argument survives tmux's own re-parsing of its argv (:func:`protect`), a word of a
command string (:func:`quote_for_tmux`), a new pane's command and environment, the argv of
one look at a pane, and how tmux's output and errors read. The facts behind each are in
:mod:`cafleet.mux.tmux`, the client that uses them.
"""

from __future__ import annotations

from cafleet.errors import MuxError
from cafleet.mux import damaged, is_number, is_socket_path

TYPE_CHECKING = False  # typing costs milliseconds on every command
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

IDENTITY_FORMAT = "#{pid}:#{start_time}:#{pane_pid}"
# stderr fragments meaning "the target, or the whole server, no longer exists".
_GONE = (
    "can't find pane",
    "can't find window",
    "can't find session",
    "no server running",
    "error connecting to",
    "server exited unexpectedly",
)


COMMAND_SEPARATOR = object()  # a literal ";" between two tmux commands in one call


def check_pane(pane_id: str) -> str:
    """A stored tmux pane id: ``%`` and a number (DamagedPlacement otherwise)."""
    if not (pane_id[:1] == "%" and is_number(pane_id[1:])):
        raise damaged("tmux pane id", pane_id, "a tmux pane id (%N)", pane=pane_id)
    return pane_id


def check_window(window_id: str) -> str:
    """A stored tmux window id: ``@`` and a number."""
    if not (window_id[:1] == "@" and is_number(window_id[1:])):
        raise damaged("tmux window id", window_id, "a tmux window id (@N)")
    return window_id


def check_identity(identity: str | None) -> str | None:
    """A stored tmux pane identity: ``<server pid>:<server start>:<pane pid>``, or None."""
    if identity is not None and not (identity.count(":") == 2 and all(map(is_number, identity.split(":")))):
        raise damaged("tmux pane identity", identity, "<server pid>:<start time>:<pane pid>")
    return identity


def check_session(session: str) -> tuple[str, str]:
    """(session id, socket path) of a stored ``<session_id>@<socket_path>``."""
    session_id, sep, socket = session.partition("@")
    if not (sep and session_id[:1] == "$" and is_number(session_id[1:]) and is_socket_path(socket)):
        raise damaged("tmux session", session, "$N@<absolute socket path>")
    return session_id, socket


def protect(arg: str) -> str:
    """Escape a final ``;`` so tmux keeps it as text instead of splitting the command."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def is_gone(stderr: str) -> bool:
    return any(marker in stderr for marker in _GONE)


def server_gone(stderr: str) -> bool:
    """Whether ``stderr`` says the whole server is gone (not one target)."""
    return any(marker in stderr for marker in _GONE[3:])


def quote_for_tmux(text: str) -> str:
    """``text`` as one single-quoted word of a tmux command string, taken literally."""
    return "'" + text.replace("'", "'\\''") + "'"


def marked_parts(out: str, marker: str) -> list[tuple[str, str]]:
    """``[(head, body)]`` of an output whose parts each start with a line ``marker\\thead``;
    anything before the first marked line is dropped."""
    parts: list[tuple[str, str]] = []
    head: str | None = None
    body: list[str] = []
    start = marker + "\t"
    for line in out.split("\n"):
        if line.startswith(start):
            if head is not None:
                parts.append((head, "\n".join(body)))
            head, body = line[len(start) :], []
        elif head is not None:
            body.append(line)
    if head is not None:
        parts.append((head, "\n".join(body)))
    return parts


def env_args(env: Mapping[str, str] | None) -> list[str]:
    args = []
    for key, value in (env or {}).items():
        if not key or "=" in key:
            raise MuxError(f"{key!r} is not a valid environment variable name.")
        args += ["-e", f"{key}={value}"]
    return args


def command_words(argv: Sequence[str]) -> list[str]:
    """tmux runs a one-word command through ``sh -c``: quote it and ``exec`` it so it runs exactly."""
    import shlex

    return list(argv) if len(argv) > 1 else [f"exec {shlex.quote(argv[0])}"]


def look(pane_id: str, lines: int, head: str = "", ansi: bool = False) -> list:
    """One look at a pane in one client call: its id, whether dead, its identity and
    foreground command (after ``head``), then its last ``lines`` lines."""
    return [
        "display-message",
        "-p",
        "-t",
        pane_id,
        f"{head}#{{pane_id}}\t#{{pane_dead}}\t{IDENTITY_FORMAT}\t#{{pane_current_command}}",
        COMMAND_SEPARATOR,
        "capture-pane",
        "-p",
        "-J",
        *(["-e"] if ansi else []),
        "-t",
        pane_id,
        "-S",
        f"-{max(1, lines)}",
    ]
