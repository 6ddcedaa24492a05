"""A fleet outlives its panes: ``cafleet fleet restore`` and ``cafleet member revive``
(docs/delivery.md, "A fleet outlives its panes").

A member is *dead* when its pane is gone (its server died, its host rebooted, the pane was
closed), names a pane cafleet did not create (its server restarted), or its agent exited
(:mod:`cafleet.delivery.supervision.liveness`). Starting it again keeps everything it is: its
member id, fleet, name, agent, model, effort, budgets, worktree, host and messages; only
its placement moves to the new pane. Its agent resumes its own conversation (the session
:mod:`cafleet.agents.sessions` finds for it) with one line saying it was started again and
what is owed; without a session it starts afresh from its spawn prompt, and says so.

Each member is started again under its old pane's input lock, after checking again that
the placement is the one found dead: a second restore waiting on that lock finds the new
placement alive and does nothing (two restores at once leave one set of panes). A pane that
claims to be the member (its environment names the member and this database) but is not its
placement (a restore killed between opening the pane and recording it) is closed first, so
a restore run again never leaves two agents resuming one conversation.
"""

from __future__ import annotations

from cafleet import clock, config
from cafleet.broker import fleets, members, messages
from cafleet.delivery.keystrokes.placement import placement_of, reach
from cafleet.errors import CafleetError, Conflict, NotAllowed, clause
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MemberDetail, PlacementRecord
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

RESTORED, FRESH, RUNNING, LOST, PENDING = "restored", "started fresh", "running", "lost", "pending"


def _restored_line(fleet_id: int, member_id: int, owed: int) -> str:
    """The one line a resumed agent gets instead of a second spawn prompt."""
    waiting = (
        f"{owed} message{'s' if owed != 1 else ''} wait{'' if owed != 1 else 's'} for you: "
        f"run `cafleet message poll {member_id}`"
        if owed
        else "no message waits for you"
    )
    return (
        f"[cafleet] Your pane was lost and cafleet started you again (fleet {fleet_id}, member {member_id}); "
        f"this is your conversation as it was. {waiting}."
    )


# -- the Director's pane ---------------------------------------------------------------------


def _pane_alive(placement) -> tuple[bool, str]:
    """(whether the placement's pane is its own and its agent runs, why not)."""
    from cafleet.delivery.supervision import liveness

    member = {"placement": placement, "member_id": 0, "last_activity_at": None, "registered_at": clock.now()}
    state, detail = liveness.pane_state(member, liveness.MuxPool(), float("inf"))  # type: ignore[arg-type]
    return state != liveness.DEAD, detail


def _take_directors_pane(
    store: Store, settings: config.Settings, fleet_id: int, director: MemberDetail, hooks: Hooks
) -> dict:
    """Make the calling pane the Director's placement when the recorded one is gone;
    refused from a pane a live member holds, and while the Director's pane lives elsewhere."""
    from cafleet.delivery import authority
    from cafleet.mux.detect import multiplexer_for_environment

    caller = authority.find(store, settings.environ)
    if caller.is_member:
        raise NotAllowed(
            f"`cafleet fleet restore` runs from the Director's pane or a new one, and {caller.describe()}; "
            "nothing was done."
        )
    placement = director["placement"]
    director_id = director["member_id"]
    if placement is None:
        raise Conflict(f"fleet {fleet_id}'s Director has no pane recorded; nothing was done.")
    if any(row["member_id"] == director_id for row in caller.pane):
        return {"member_id": director_id, "outcome": RUNNING, "pane_id": placement["pane_id"], "detail": "this pane"}
    if caller.pane:
        row = caller.pane[0]
        raise NotAllowed(
            f"this pane is fleet {row['fleet_id']}'s Director's, so it cannot become fleet {fleet_id}'s; "
            "run `cafleet fleet restore` from a new pane. Nothing was done."
        )
    pane = multiplexer_for_environment(settings.environ).current_pane()
    recorded = (placement["backend"], placement["session"], placement["pane_id"], placement["identity"])
    if (pane.backend, pane.session, pane.pane_id, pane.identity) == recorded:
        return {"member_id": director_id, "outcome": RUNNING, "pane_id": pane.pane_id, "detail": "this pane"}
    alive, why = _pane_alive(placement)
    if alive:
        raise Conflict(
            f"fleet {fleet_id}'s Director is alive in pane {placement['pane_id']}; run `cafleet fleet restore "
            f"{fleet_id}` there. Nothing was done."
        )
    from cafleet.delivery.keystrokes.lock import placement_lock

    with placement_lock(store.locks, placement, settings.lock_timeout, hooks):
        moved = members.move_placement(store, director_id, was=placement, **placement_of(pane))
    if not moved:
        raise Conflict(
            f"fleet {fleet_id}'s Director's pane was recorded again by another command meanwhile; "
            f"see `cafleet fleet show {fleet_id}`. Nothing was done."
        )
    return {"member_id": director_id, "outcome": RESTORED, "pane_id": pane.pane_id, "detail": why}


# -- one member ------------------------------------------------------------------------------


class Plan:
    """How a member is started again: its command, and what the outcome will say."""

    __slots__ = ("argv", "cwd", "detail", "outcome", "session_id")

    def __init__(self, argv: list[str], outcome: str, detail: str, session_id: str | None, cwd: str | None):
        self.argv = argv
        self.outcome = outcome
        self.detail = detail
        self.session_id = session_id
        self.cwd = cwd


def plan(store: Store, member: MemberDetail, director_id: int) -> Plan:
    """The command that starts ``member`` again: its agent resuming its own session, or,
    without one, its spawn prompt with a note saying the conversation could not be resumed."""
    from cafleet.agents import backends, sessions
    from cafleet.agents.prompt import render_spawn_prompt
    from cafleet.broker import spawns, usage

    member_id, fleet_id = member["member_id"], member["fleet_id"]
    agent = member["coding_agent"] or backends.STANDIN
    spawn = spawns.get(store, member_id) or {}
    source = usage.sources(store, [member_id]).get(member_id) or {}
    session = spawn.get("session_id") or (source.get("session_id") if agent == "claude" else None)
    if not session and spawn:
        session = _pin(store, fleet_id, member_id, agent, source)
    cwd = spawn.get("cwd") if spawn else source.get("cwd")
    name, model, effort = member["name"], spawn.get("model"), spawn.get("effort")
    if agent == backends.STANDIN or (session is not None and sessions.valid(agent, session)):
        line = _restored_line(fleet_id, member_id, messages.waiting_for(store, member_id))
        argv = backends.resume_argv(
            agent, member_name=name, session=session or "", line=line, model=model, effort=effort, member_id=member_id
        )
        detail = "its agent started again" if agent == backends.STANDIN else f"resumed its session {session}"
        if agent == "opencode":
            detail += " (opencode takes no first line beside a session: its owed previews wake it)"
        return Plan(argv, RESTORED, detail, session, cwd)
    why = "no session of its agent was recorded" if not session else f"its recorded session {session!r} is malformed"
    text = render_spawn_prompt(
        spawn.get("prompt") or "",
        fleet_id=fleet_id,
        member_id=member_id,
        director_member_id=director_id,
        coding_agent=agent,
    )
    text += (
        f"\n\n(cafleet started you again after your pane was lost, but {why}, so this is a new conversation: "
        f"ask member {director_id}, your Director, what you were doing.)"
    )
    argv = backends.build_argv(agent, member_name=name, prompt=text, model=model, effort=effort, member_id=member_id)
    return Plan(argv, FRESH, why + "; started with its spawn prompt", None, cwd)


def _pin(store: Store, fleet_id: int, member_id: int, agent: str, source: dict) -> str | None:
    """The codex or opencode session found in the member's own records (its usage source:
    the agent's folder, the pane's folder, the spawn time), kept once found; None when none
    is found yet (or the agent is another)."""
    from cafleet.agents import sessions
    from cafleet.broker import spawns

    if not source or agent not in ("codex", "opencode"):
        return None
    started, folder = source["started_at"], source["data_dir"]
    if agent == "codex":
        found = sessions.codex_session(folder, started_at=started, fleet_id=fleet_id, member_id=member_id)
    else:
        found = sessions.opencode_session(
            folder, cwd=source["cwd"], started_at=started, fleet_id=fleet_id, member_id=member_id
        )
    return spawns.pin_session(store, member_id, found) if found else None


def pin_sessions(store: Store, fleet_id: int) -> None:
    """Keep the session of each of the fleet's codex and opencode members that has none kept
    yet, as soon as its agent wrote it (the keeper, every few seconds): a session written
    into the same folder later, by anyone, never replaces it."""
    from cafleet.broker import spawns, usage

    waiting = spawns.unpinned(store, fleet_id, ("codex", "opencode"))
    if waiting:
        found = usage.sources(store, [member_id for member_id, _agent in waiting])
        for member_id, agent in waiting:
            _pin(store, fleet_id, member_id, agent, found.get(member_id) or {})


def restore_member(
    store: Store, settings: config.Settings, member: MemberDetail, director: MemberDetail, hooks: Hooks = NO_HOOKS
) -> dict:
    """Start ``member`` again when its pane is dead; its outcome ``{"member_id", "outcome",
    "pane_id", "detail"}`` (never raises for one member's failure: the outcome says it)."""
    member_id = member["member_id"]
    placement = member["placement"]
    out = {"member_id": member_id, "outcome": RUNNING, "pane_id": placement and placement["pane_id"], "detail": ""}
    if placement is None or placement["pane_id"] is None:
        return dict(out, outcome=PENDING, detail="its creation is still under way")
    alive, why = _pane_alive(placement)
    if alive:
        return dict(out, detail="its pane is alive")
    if director["placement"] is None:  # only while the Director's own creation is under way
        return dict(out, outcome=LOST, detail="the Director has no pane recorded")
    try:
        return _restart(store, settings, member, placement, director["member_id"], director["placement"], why, hooks)
    except CafleetError as error:
        return dict(out, outcome=LOST, detail=clause(error))


def _restart(
    store: Store,
    settings: config.Settings,
    member: MemberDetail,
    placement: PlacementRecord,
    director_id: int,
    beside: PlacementRecord,
    why: str,
    hooks: Hooks,
) -> dict:
    """Start ``member`` (whose ``placement`` was found dead for ``why``) in a new pane beside
    the Director's (``beside``), or on its own host."""
    from cafleet.delivery.keystrokes.lock import placement_lock
    from cafleet.mux.ssh import split_session

    member_id = member["member_id"]
    host, _ = split_session(placement["session"])
    with placement_lock(store.locks, placement, settings.lock_timeout, hooks):
        now = members.get_member(store, member_id)
        if now["status"] != "active" or now["placement"] != placement:
            pane_id = now["placement"] and now["placement"]["pane_id"]
            detail = "started again by another command meanwhile"
            return {"member_id": member_id, "outcome": RUNNING, "pane_id": pane_id, "detail": detail}
        how = plan(store, member, director_id)
        closed = _close_claimants(settings, member_id, beside, host)
        hooks.pause("restore.planned")
        if host is None:
            pane_id, identity, recorded, window = _open_local(store, settings, member, beside, how, hooks)
        else:
            pane_id, identity, recorded, window = _open_remote(settings, member, host, how)
        try:
            hooks.pause("restore.opened")
            _record_pane(store, settings, member_id, placement, recorded, window, pane_id, identity, hooks)
        except BaseException:  # a signal too: the pane just opened is closed, the member stays dead
            _kill_quietly(recorded, pane_id)
            raise
    detail = f"{why}; {how.detail}" + (f"; {closed}" if closed else "")
    return {"member_id": member_id, "outcome": how.outcome, "pane_id": pane_id, "detail": detail}


def _record_pane(
    store: Store,
    settings: config.Settings,
    member_id: int,
    placement: PlacementRecord,
    recorded: dict,
    window: str,
    pane_id: str,
    identity: str | None,
    hooks: Hooks,
) -> None:
    """Record the member's new pane (``recorded``'s backend and session, ``window``,
    ``pane_id``, ``identity``) in place of its dead ``placement``, under the new pane's lock;
    Conflict when the placement changed meanwhile."""
    from contextlib import nullcontext

    from cafleet.delivery.keystrokes.lock import placement_lock

    same = (recorded["backend"], recorded["session"], pane_id) == (
        placement["backend"],
        placement["session"],
        placement["pane_id"],
    )  # a server restarted on the same socket numbers its panes anew: the lock held already
    new_lock = (
        nullcontext() if same else placement_lock(store.locks, recorded, settings.lock_timeout, hooks, pane_id=pane_id)
    )
    with new_lock:
        moved = members.move_placement(
            store,
            member_id,
            was=placement,
            backend=recorded["backend"],
            session=recorded["session"],
            window_id=window,
            pane_id=pane_id,
            identity=identity,
        )
    if not moved:
        raise Conflict(f"member {member_id}'s placement changed meanwhile")


def _open_local(
    store: Store, settings: config.Settings, member: MemberDetail, placement: PlacementRecord, how: Plan, hooks: Hooks
):
    """A new pane where ``member create`` would open one now (beside the Director's pane,
    ``placement``, or in the fleet's own window: :mod:`cafleet.delivery.spawning.layout`)."""
    from cafleet.delivery.spawning import layout
    from cafleet.delivery.spawning.create import fleet_panes
    from cafleet.delivery.spawning.launch import pane_environment
    from cafleet.store.engines import member_location

    mux = reach(placement)
    database = member_location(settings.database, settings.environ)
    env = pane_environment(store, database, member["fleet_id"], member["member_id"])
    cwd = how.cwd if how.cwd and _isdir(how.cwd) else None
    if how.cwd and cwd is None:
        raise CafleetError(f"its folder {how.cwd} is gone; nothing was started")
    fleet_id = member["fleet_id"]
    pane_id, identity, window = layout.open_local(
        settings,
        hooks,
        dict(placement),
        mux,
        how.argv,
        cwd=cwd,
        env=env,
        mode=layout.choose(None, fleets.default_placement(store, fleet_id)),
        fleet_name=fleets.get_fleet(store, fleet_id)["name"],
        member_panes=fleet_panes(store, fleet_id, placement["session"]) - {_pane_of(member)},
    )
    recorded = {"backend": placement["backend"], "session": placement["session"]}
    return pane_id, identity, recorded, window


def _open_remote(settings: config.Settings, member: MemberDetail, host: str, how: Plan):
    """A new tmux session of its own on the member's host (as ``member create --host`` made)."""
    from cafleet.delivery.spawning.remote import REMOTE_SERVER, remote_database_location, remote_pane_env
    from cafleet.mux.base import Program
    from cafleet.mux.ssh import Ssh, join_session
    from cafleet.mux.tmux import Tmux

    ssh = Ssh(host, settings.environ)
    database = remote_database_location(ssh, settings.database)
    mux = Tmux(None, remote=ssh, label=REMOTE_SERVER)
    env = remote_pane_env(settings.environ, database, host, member["fleet_id"], member["member_id"])
    program = Program(how.argv, how.cwd, env)
    session, window_id, pane_id, identity = mux.new_session(program, window_name=f"cafleet-{member['member_id']}")
    return pane_id, identity, {"backend": "tmux", "session": join_session(host, session)}, window_id


def _close_claimants(settings: config.Settings, member_id: int, placement: PlacementRecord, host: str | None) -> str:
    """Close the panes that were started for this member but never recorded (a restore or
    revive killed half-way): on this machine, the panes of the Director's server whose
    process's environment names the member and this database; on another host, the
    sessions of cafleet's server there that do. What was closed, as a clause ("" for none)."""
    from cafleet.store.engines import member_location

    if host is not None:
        from cafleet.delivery.spawning.remote import close_started_session, remote_database_location
        from cafleet.mux.ssh import Ssh

        ssh = Ssh(host, settings.environ)
        said = close_started_session(ssh, member_id, remote_database_location(ssh, settings.database))
        return said if said.startswith("closed") else ""
    if placement["backend"] != "tmux":
        return ""
    database = member_location(settings.database, settings.environ)
    want = {b"CAFLEET_MEMBER_ID=" + str(member_id).encode(), b"CAFLEET_DATABASE_URL=" + database.encode()}
    mux = reach(placement)
    closed = []
    for pane_id, pid in mux.panes_with_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                entries = set(handle.read().split(b"\0"))
        except OSError:
            continue
        # the placement is dead: its own pane (an agent back at a shell) goes too
        if want <= entries and _kill_quietly({"backend": "tmux", "session": placement["session"]}, pane_id):
            closed.append(pane_id)
    return f"closed pane {', '.join(closed)} started for it earlier but never recorded" if closed else ""


def _kill_quietly(recorded: dict, pane_id: str) -> bool:
    from cafleet.mux.detect import multiplexer_for_placement

    try:
        return multiplexer_for_placement(recorded["backend"], recorded["session"]).kill(pane_id)
    except CafleetError:
        return False


def _pane_of(member: MemberDetail) -> str | None:
    return member["placement"]["pane_id"] if member["placement"] else None


def _isdir(path: str) -> bool:
    import os

    return os.path.isdir(path)


# -- the commands ----------------------------------------------------------------------------


def restore_fleet(store: Store, settings: config.Settings, fleet_id: int, hooks: Hooks = NO_HOOKS) -> dict:
    """``cafleet fleet restore``: the Director's pane, then every member whose pane is dead."""
    director = members.get_member(store, fleets.require_live(store, fleet_id))
    outcome = _take_directors_pane(store, settings, fleet_id, director, hooks)
    director = members.get_member(store, director["member_id"])  # its placement now
    results = [outcome]
    for member in members.roster_detail(store, fleet_id):
        if member["member_id"] != director["member_id"]:
            results.append(restore_member(store, settings, member, director, hooks))
    return {"fleet_id": fleet_id, "members": results}


def revive_member(store: Store, settings: config.Settings, member_id: int, hooks: Hooks = NO_HOOKS) -> dict:
    """``cafleet member revive``: one member whose pane is dead started again (Director only)."""
    member = members.get_member(store, member_id)
    if member["status"] != "active":
        raise Conflict(f"member {member_id} is deregistered; nothing to revive.")
    fleet_id = member["fleet_id"]
    director = members.get_member(store, fleets.require_live(store, fleet_id))
    if director["member_id"] == member_id:
        raise Conflict(
            f"member {member_id} is fleet {fleet_id}'s Director; from a new pane, `cafleet fleet restore {fleet_id}` "
            "makes that pane the Director's."
        )
    alive, why = _pane_alive(director["placement"])
    if not alive and member["placement"] and not member["placement"]["session"].startswith("ssh://"):
        raise Conflict(
            f"fleet {fleet_id}'s Director's pane is gone too ({why}); run `cafleet fleet restore {fleet_id}` "
            "from a new pane. Nothing was done."
        )
    result = restore_member(store, settings, member, director, hooks)
    if result["outcome"] in (RESTORED, FRESH):
        from cafleet.broker import revivals

        if revivals.per_hour(store, fleet_id) is not None:  # the keeper's count starts again
            revivals.record(store, fleet_id, member_id, revivals.DIRECTOR, result["outcome"])
    if result["outcome"] == RUNNING and result["detail"] == "its pane is alive":
        raise Conflict(f"member {member_id} is alive in pane {result['pane_id']}; nothing to revive.")
    if result["outcome"] == PENDING:
        raise Conflict(f"member {member_id} has no pane yet (its creation is pending); nothing to revive.")
    return result
