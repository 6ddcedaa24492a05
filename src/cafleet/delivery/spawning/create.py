"""Member creation (``member create``): what it asks for (:class:`SpawnRequest`), the checks
that run before anything is written (only the Director's pane creates; the spawn prompt,
the budgets, the worktree options, room for the member), and the new pane on this machine,
where the placement says, with the member's usage source recorded before its agent starts.
A member on another host gets a session of its own (:mod:`cafleet.delivery.spawning.remote`);
the steps both share are in :mod:`cafleet.delivery.spawning.launch` (docs/delivery.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from cafleet import config
from cafleet.broker import fleets, members
from cafleet.delivery.keystrokes.placement import reach, recorded_at
from cafleet.delivery.spawning.launch import Creation, Spawn, pane_environment, register_and_open
from cafleet.errors import CafleetError
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


def _same_pane(caller, placement: Mapping[str, Any]) -> bool:
    """Whether the calling pane is the placement's: same backend and pane id, and the same
    identity (server and pane). A legacy placement (no identity) needs the same server
    address (the part of the session after ``@``) and, for tmux, a server started no later
    than the placement was recorded."""
    if (caller.backend, caller.pane_id) != (placement["backend"], placement["pane_id"]):
        return False
    if placement.get("identity"):
        return caller.identity == placement["identity"]
    if caller.session.partition("@")[2] != placement["session"].partition("@")[2]:
        return False
    started, recorded = (caller.identity or "").split(":")[1:2], recorded_at(placement)
    return caller.backend != "tmux" or not started or recorded is None or int(started[0]) <= int(recorded)


MAX_COMMAND_BYTES = 12_000
"""The most bytes a member's command may take: its agent's argv, the spawn prompt (with its
placeholders and identity lines filled in) included. tmux carries one command of at most
16 KiB (longer: "command too long"), which also holds the pane's directory, environment
and tmux's own options; measured on tmux 3.4 (docs/usage.md)."""


def _check_command(prompt: str, *, agent, name, model, effort, fleet_id: int, director_id: int) -> None:
    """Refuse, before anything is written, a spawn prompt that no pane could start: one
    holding a NUL, or one that makes the member's command longer than MAX_COMMAND_BYTES
    with the largest member id it could be given."""
    from cafleet.agents import backends
    from cafleet.agents.prompt import render_spawn_prompt
    from cafleet.errors import UsageError
    from cafleet.validation import MAX_ID

    text = render_spawn_prompt(
        prompt, fleet_id=fleet_id, member_id=MAX_ID, director_member_id=director_id, coding_agent=agent
    )
    session = "0" * 36 if agent == "claude" else None  # a session id's length
    argv = backends.build_argv(
        agent, member_name=name, prompt=text, model=model, effort=effort, member_id=MAX_ID, session_id=session
    )
    size = sum(len(arg.encode("utf-8", "surrogatepass")) + 1 for arg in argv)
    if size > MAX_COMMAND_BYTES:
        raise UsageError(
            f"the spawn prompt is too long: the member's command (the prompt with its identity lines, the "
            f"name and the agent's options) would take {size} bytes, and a pane's command holds at most "
            f"{MAX_COMMAND_BYTES}; put the details in a file the member reads, or send them as a message once "
            "it has started."
        )


@dataclass(frozen=True)
class SpawnRequest:
    """What ``member create`` asks for, built once by its handler and passed whole: the
    fleet, the member's name and description, its agent (None: the Director's), model and
    effort, the spawn prompt, the host (None: this machine), its budgets, ``force`` (past
    the fleet's budget and cap), the worktree options (``worktree`` None: the fleet's
    default) and the placement (None: the fleet's default)."""

    fleet_id: int
    name: str
    description: str
    prompt: str
    coding_agent: str | None = None
    model: str | None = None
    effort: str | None = None
    host: str | None = None
    budget_usd: float | None = None
    budget_tokens: int | None = None
    force: bool = False
    worktree: bool | None = None
    branch: str | None = None
    base: str | None = None
    repo: str | None = None
    placement: str | None = None


def create_member(store: Store, settings: config.Settings, request: SpawnRequest, hooks: Hooks = NO_HOOKS) -> dict:
    """Member creation: pending registration, spawn prompt, split a pane, record it under the lock.

    ``request`` is what ``member create`` asked for, whole. With its ``worktree`` (None:
    the fleet's default, ``fleet create --worktrees``), the pane starts in a new git
    worktree of the repository holding the current directory, on a new branch (``branch``, else one named after the fleet and member) from ``base`` (else the
    current ``HEAD``): checked before the registry write, recorded and added after it
    (:mod:`cafleet.delivery.worktrees`).

    Every check that can fail without side effects runs first (the spawn prompt's NUL and
    length, the budgets, a fleet over its budget unless ``force``); any failure after the
    registry write is compensated (pane killed, member deregistered) and reported.
    With ``host``, the pane is a new tmux session on that host, over SSH
    (:func:`cafleet.delivery.spawning.remote.create_remote`); else it opens where
    ``placement`` says (None: the fleet's default, else ``auto``;
    :mod:`cafleet.delivery.spawning.layout`).
    """
    from cafleet.agents import backends
    from cafleet.delivery.spawning import layout

    environ, fleet_id, host = settings.environ, request.fleet_id, request.host
    director, director_placement, mux = _directors_pane(store, environ, fleet_id)
    spawn = Spawn(
        fleet_id,
        director["member_id"],
        request.name,
        request.description,
        request.coding_agent or director_placement["coding_agent"],
        request.model,
        request.effort,
        request.prompt,
    )
    _check_spawn(store, environ, spawn, request)
    worktree = _check_worktree_options(store, request)
    if host is not None and request.placement is not None:
        from cafleet.errors import UsageError

        raise UsageError("--placement is for members on this machine; one on another host gets a session of its own.")
    mode = layout.choose(request.placement, fleets.default_placement(store, fleet_id)) if host is None else ""
    from cafleet.delivery.spawning.capacity import check_room  # the fleet's cap, the host's memory: before any write

    check_room(store, settings, fleet_id, spawn.agent, host, request.force)
    if host is not None:
        from cafleet.delivery.spawning.remote import create_remote

        plan = _worktree_plan(environ, request) if worktree else None
        return create_remote(store, settings, host, spawn, plan, hooks)
    backends.find_binary(spawn.agent, environ)
    cwd = _cwd()  # the new pane starts here; a deleted directory is refused before any write
    plan = _worktree_plan(environ, request, cwd) if worktree else None
    creation = Creation(store, settings, spawn, plan, director_placement, mux, hooks)
    return _create_local(creation, cwd, request, mode)


def _worktree_plan(environ, request: SpawnRequest, cwd: str | None = None):
    """The member's new worktree, refused here, before any write: from ``cwd`` on this
    machine, or (``cwd`` None) on ``request.host``, in the repository at ``request.repo``,
    else at the same path as the current directory."""
    from cafleet.delivery import worktrees

    if cwd is None:
        return worktrees.plan(environ, request.repo or _cwd(), request.branch, request.base, host=request.host)
    return worktrees.plan(environ, cwd, request.branch, request.base)


def _create_local(creation: Creation, cwd: str, request: SpawnRequest, mode: str):
    """A member in a new pane beside the Director's (the creation's placement), placed by
    ``mode`` (:mod:`cafleet.delivery.spawning.layout`), in ``cwd`` (or its new worktree),
    with its usage source recorded before its agent starts."""
    from cafleet.delivery.spawning import layout
    from cafleet.store.engines import member_location

    store, settings, spawn, placement = creation.store, creation.settings, creation.spawn, creation.placement

    database = member_location(
        settings.database, settings.environ
    )  # no password in the pane's argv: a private pgpass file

    def open_pane(member_id: int, workdir: str | None) -> tuple[str, str | None, dict, str | None]:
        workdir = workdir or cwd
        session_id = _record_usage_source(
            store,
            settings.environ,
            member_id,
            spawn.agent,
            workdir,
            budget_usd=request.budget_usd,
            budget_tokens=request.budget_tokens,
        )
        spawn.record(store, member_id, workdir, session_id)
        pane_env = pane_environment(store, database, spawn.fleet_id, member_id)
        pane_id, identity, window_id = layout.open_local(
            settings,
            creation.hooks,
            placement,
            creation.mux,
            spawn.argv(member_id, session_id),
            cwd=workdir,
            env=pane_env,
            mode=mode,
            fleet_name=fleets.get_fleet(store, spawn.fleet_id)["name"],
            member_panes=fleet_panes(store, spawn.fleet_id, placement["session"]),
        )
        return pane_id, identity, placement, window_id

    return register_and_open(creation, open_pane)


def fleet_panes(store: Store, fleet_id: int, session: str) -> set[str]:
    """The pane ids of the fleet's active members in ``session`` (those a split may halve)."""
    return {
        entry["placement"]["pane_id"]
        for entry in members.roster_detail(store, fleet_id)
        if entry["status"] == "active"
        and entry["placement"]
        and entry["placement"]["session"] == session
        and entry["placement"]["pane_id"]
    }


def _directors_pane(store: Store, environ, fleet_id: int):
    """(the Director's record, its placement, its multiplexer client), when this command
    runs in the Director's own pane: only the Director creates members."""
    from cafleet.mux.detect import multiplexer_for_environment

    director = members.get_member(store, fleets.require_live(store, fleet_id))
    placement = director["placement"]
    if placement is None or placement["pane_id"] is None:
        raise CafleetError(f"fleet {fleet_id}'s Director has no pane; recreate the fleet from a pane.")
    mux = reach(placement)  # a damaged placement is refused here, before anything is run or written
    caller = multiplexer_for_environment(environ).current_pane()
    if not _same_pane(caller, placement):
        raise CafleetError(
            f"only fleet {fleet_id}'s Director (pane {placement['pane_id']}) can create members; "
            f"this command runs in pane {caller.pane_id}"
            + (" of another server or an earlier pane with that id." if caller.pane_id == placement["pane_id"] else ".")
        )
    return director, placement, mux


def _check_spawn(store: Store, environ, spawn: Spawn, request: SpawnRequest) -> None:
    """The checks on what the member starts with: its agent's options, the spawn prompt,
    its budgets, and its fleet's budget (unless ``request.force``)."""
    from cafleet.agents import backends
    from cafleet.agents.prompt import check_template

    backends.validate(spawn.agent, spawn.model, spawn.effort)
    check_template(spawn.prompt)
    _check_command(
        spawn.prompt,
        agent=spawn.agent,
        name=spawn.name,
        model=spawn.model,
        effort=spawn.effort,
        fleet_id=spawn.fleet_id,
        director_id=spawn.director_id,
    )
    budget_usd, budget_tokens = request.budget_usd, request.budget_tokens
    _check_budgets(budget_usd, budget_tokens)
    if not request.force:  # the spawn prompt is new work: a fleet over its budget gets none
        from cafleet.broker import usage
        from cafleet.delivery.usage import check_fleet_budget

        check_fleet_budget(store, environ, spawn.fleet_id, usage.fleet_budget(store, spawn.fleet_id), "create")
    if (budget_usd is not None or budget_tokens is not None) and request.host is not None:
        raise CafleetError(
            "a member on another host has no budget: its agent's records are on that host; "
            "leave out --budget-usd/--budget-tokens."
        )


def _check_worktree_options(store: Store, request: SpawnRequest) -> bool:
    """Whether the member gets a worktree (``request.worktree`` None: the fleet's default),
    after checking that the options that shape it go together."""
    from cafleet.errors import UsageError

    worktree, branch, base, repo, host = request.worktree, request.branch, request.base, request.repo, request.host
    if worktree is None:
        from cafleet.broker import worktrees as worktree_records

        worktree = worktree_records.fleet_default(store, request.fleet_id)
    if not worktree and (branch is not None or base is not None):
        raise UsageError("--branch and --base choose the member's worktree; add --worktree.")
    if repo is not None and not (worktree and host is not None):
        raise UsageError("--repo names the repository on another host; it needs --worktree and --host.")
    if repo is not None and not repo.startswith("/"):
        raise UsageError(f"--repo must be an absolute path on the host, got {repo!r}.")
    return bool(worktree)


def _cwd() -> str:
    import os

    try:
        return os.getcwd()
    except OSError:
        raise CafleetError(
            "the current directory no longer exists, so the new pane has nowhere to start; "
            "cd to an existing directory and retry."
        ) from None


def _check_budgets(usd: float | None, tokens: int | None) -> None:
    """A member's budgets within the bounds declared for ``--budget-usd``/``--budget-tokens``
    (the command line's parser checks them already; this guards every other caller)."""
    from cafleet.config import declared
    from cafleet.errors import UsageError

    for flag, value in (("--budget-usd", usd), ("--budget-tokens", tokens)):
        setting = declared(flag)
        if value is not None and (
            type(value) not in (int, float) or isinstance(value, bool) or not setting.low <= value <= setting.high
        ):
            raise UsageError(f"the member's budget must be {setting.allowed()}, got {value!r}.")


def _record_usage_source(store: Store, environ, member_id: int, agent: str, cwd: str, **budgets) -> str | None:
    """Choose what ties the member's usage records to it (claude: a new session id) and
    record it with the agent's data folder and the pane's cwd (docs/usage.md); returns
    claude's session id. The auxiliary table is created when the database has none yet."""
    from cafleet.agents import backends
    from cafleet.broker import usage

    session_id = None
    if agent == "claude":
        import uuid

        session_id = str(uuid.uuid4())
    data_dir = backends.data_dir(agent, environ)
    usage.record_source(
        store, member_id, coding_agent=agent, session_id=session_id, data_dir=data_dir, cwd=cwd, **budgets
    )
    return session_id
