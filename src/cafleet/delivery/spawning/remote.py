"""A member on another host: a detached tmux session of its own on the host's ``-L
cafleet`` server, reached over SSH; what its pane starts with (the cafleet settings it is
handed, the database location with a password kept in a private pgpass file there), the
host's programs checked first, and the session closed after a creation that never learnt
its pane (docs/delivery.md).
"""

from __future__ import annotations

from cafleet import config
from cafleet.delivery.spawning.launch import Creation, register_and_open
from cafleet.errors import CafleetError, clause

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.delivery.spawning.launch import Spawn
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


# Variables that describe this machine, not the fleet: never handed to a pane on another host.
_HOST_LOCAL = frozenset(
    {
        "CAFLEET_SSH_CONFIG",
        "CAFLEET_SSH_CONTROL_DIR",
        "CAFLEET_HOST",
        "CAFLEET_MULTIPLEXER",
        "CAFLEET_HERDR_BIN",
    }
)


def remote_pane_env(environ, database: str, host: str, fleet_id: int, member_id: int) -> dict[str, str]:
    """What a member's pane on ``host`` starts with: the caller's cafleet settings, those
    declared in :mod:`cafleet.config` only (a local pane inherits them from its tmux server;
    a remote server has its own), the database location, the member's ids, and
    ``CAFLEET_HOST`` naming the host it runs on. Any other ``CAFLEET_*`` variable stays here."""
    forwarded = config.declared_names() - _HOST_LOCAL
    env = {key: value for key, value in environ.items() if key in forwarded and value}
    env.update(
        CAFLEET_DATABASE_URL=database,
        CAFLEET_MEMBER_ID=str(member_id),
        CAFLEET_FLEET_ID=str(fleet_id),
        CAFLEET_HOST=host,
    )
    return env


def create_remote(store: Store, settings: config.Settings, host: str, spawn: Spawn, plan, hooks: Hooks) -> dict:
    """A member on another host: check that the host answers and has tmux and the agent,
    register it pending (session ``ssh://<host>/``), open a detached tmux session of its
    own on the host's ``-L cafleet`` server, and record the session, window and pane.
    With ``plan`` (``--worktree``), the session starts in the member's new worktree there."""
    from cafleet.agents import backends
    from cafleet.mux.base import Program
    from cafleet.mux.ssh import Ssh, join_session
    from cafleet.mux.tmux import Tmux

    environ = settings.environ
    ssh = Ssh(host, environ)
    probe = backends.build_argv(
        spawn.agent, member_name=spawn.name, prompt="", model=spawn.model, effort=spawn.effort, member_id=0
    )[0]
    missing = remote_missing(ssh, ["tmux", probe])
    if missing:
        raise CafleetError(
            f"{missing} is not installed on host {host} (not on its PATH for SSH commands); "
            "install it there, or check with `cafleet doctor --host`."
        )
    database = remote_database_location(ssh, settings.database)
    mux = Tmux(None, remote=ssh, label=REMOTE_SERVER)

    def open_pane(member_id: int, workdir: str | None) -> tuple[str, str | None, dict, str | None]:
        import uuid

        session_id = str(uuid.uuid4()) if spawn.agent == "claude" else None  # what a restore resumes
        spawn.record(store, member_id, workdir, session_id)
        env = remote_pane_env(environ, database, host, spawn.fleet_id, member_id)
        program = Program(spawn.argv(member_id, session_id), workdir, env)
        session, window_id, pane_id, identity = mux.new_session(program, window_name=f"cafleet-{member_id}")
        mux.socket = session.partition("@")[2]  # from now on, exactly the server that holds the pane
        return pane_id, identity, {"backend": "tmux", "session": join_session(host, session)}, window_id

    pending = {"backend": "tmux", "session": join_session(host, ""), "window_id": ""}
    creation = Creation(store, settings, spawn, plan, pending, mux, hooks)
    out = register_and_open(
        creation, open_pane, close_unknown=lambda member_id: close_started_session(ssh, member_id, database)
    )
    added = out.pop("worktree", None)
    out["host"] = host  # before the worktree, as the record has always been ordered
    if added is not None:
        out["worktree"] = added
    return out


# Closes the sessions of cafleet's server on the host ($1) whose environment is the one
# cafleet gave a member's pane: its member id ($2) and database ($3); prints their ids.
_CLOSE_STARTED = (
    'for s in $(tmux -L "$1" list-sessions -F "#{session_id}" 2>/dev/null); do '
    '[ "$(tmux -L "$1" show-environment -t "$s" CAFLEET_MEMBER_ID 2>/dev/null)" = "CAFLEET_MEMBER_ID=$2" ] '
    '&& [ "$(tmux -L "$1" show-environment -t "$s" CAFLEET_DATABASE_URL 2>/dev/null)" = "CAFLEET_DATABASE_URL=$3" ] '
    '&& tmux -L "$1" kill-session -t "$s" && printf "%s\\n" "$s"; done; true'
)


def close_started_session(ssh, member_id: int, database: str) -> str:
    """After a failed creation whose pane cafleet never learnt (new-session's report was
    lost: unreadable, cut by a timeout or a signal), close the session it may have started
    on the host, found by what cafleet gave it: the member id (never reused) and the
    database, in its environment. What was done, for the clean-up report."""
    from cafleet.render import inline

    try:
        code, out, err = ssh.run(["sh", "-c", _CLOSE_STARTED, "sh", REMOTE_SERVER, str(member_id), database])
    except CafleetError as error:
        return f"could not confirm that no tmux session of it runs on host {ssh.host} ({clause(error)})"
    if code != 0:
        from cafleet.mux import first_line

        reason = first_line(err) or f"exit status {code}"
        return f"could not confirm that no tmux session of it runs on host {ssh.host} ({reason})"
    sessions = out.split()
    if not sessions:
        return f"found no tmux session of it on host {ssh.host}"
    return f"closed its tmux session on host {ssh.host} ({', '.join(inline(s) for s in sessions)})"


REMOTE_SERVER = "cafleet"  # the tmux server (-L) that holds members' panes on another host

# Writes standard input to a pgpass file in a private folder on the host ($1 is its name,
# never a secret) and prints the file's path: the host's own XDG_RUNTIME_DIR, else ~/.cache.
_REMOTE_PASSFILE = (
    'umask 077; d="${XDG_RUNTIME_DIR:-$HOME/.cache}/cafleet"; mkdir -p "$d" && [ -d "$d" ] && [ ! -L "$d" ] '
    '&& [ -O "$d" ] && chmod 700 "$d" && cat > "$d/$1.tmp" && mv -f "$d/$1.tmp" "$d/$1" && printf "%s\\n" "$d/$1"'
)


def remote_database_location(ssh, database: str) -> str:
    """The database location a member's pane on ``ssh``'s host gets
    (:func:`cafleet.store.remote_member_location`): a password it carries is written
    there, to a private pgpass file, through SSH's standard input (so the password is in
    no argv on either machine)."""
    from cafleet.store.engines import remote_member_location

    def keep_password(name: str, line: str) -> str:
        from cafleet.errors import MuxError
        from cafleet.mux import first_line

        code, out, err = ssh.run(["sh", "-c", _REMOTE_PASSFILE, "sh", name], input=line.encode())
        path = (out.strip().splitlines() or [""])[-1]
        if code != 0 or not (path.startswith("/") and path.endswith("/" + name)):
            raise MuxError(
                f"host {ssh.host} could not keep the database password in a private file "
                f"({first_line(err) or f'exit status {code}'}); nothing was written."
            )
        return path

    return remote_member_location(database, keep_password)


def remote_missing(ssh, programs: list[str]) -> str | None:
    """The first of ``programs`` the host cannot run (None: all there), in one SSH call."""
    script = 'for p; do command -v "$p" >/dev/null 2>&1 || { printf %s "$p"; exit 3; }; done'
    code, out, err = ssh.run(["sh", "-c", script, "sh", *programs])
    if code == 3:
        return out.strip() or programs[0]
    if code != 0:
        from cafleet.errors import MuxError
        from cafleet.mux import first_line

        raise MuxError(f"host {ssh.host} could not run a shell command ({first_line(err) or f'exit status {code}'}).")
    return None
